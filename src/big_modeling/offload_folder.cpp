#include "big_modeling/offload_folder.hpp"

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/json_reader.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h> // NoGradGuard / GradMode: not through ATen.h in LibTorch 2

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <map>

namespace accel::big_modeling {

namespace {

// NumPy's names (str(array.dtype)) for the dtypes LibTorch shares with it, plus Accelerate's "bfloat16".
const std::vector<std::pair<const char *, at::ScalarType>> &dtype_names()
{
    static const std::vector<std::pair<const char *, at::ScalarType>> names{
        {"float32", at::kFloat},  {"float16", at::kHalf},  {"bfloat16", at::kBFloat16}, {"float64", at::kDouble},
        {"int64", at::kLong},     {"int32", at::kInt},     {"int16", at::kShort},       {"int8", at::kChar},
        {"uint8", at::kByte},     {"bool", at::kBool},     {"complex64", at::kComplexFloat},
        {"complex128", at::kComplexDouble}};
    return names;
}

bool usable_file_name(const std::string &name)
{
    return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
           name.find('\0') == std::string::npos;
}

OffloadEntry parse_entry(const std::string &name, const JsonValue &v, const std::string &what)
{
    const std::string where = what + ": \"" + name + "\"";
    if (!usable_file_name(name)) fail(ACCEL_ERR_DATA_LOSS, where + " is not a usable file name (<name>.dat)");
    if (v.kind != JsonValue::Kind::Object) fail(ACCEL_ERR_DATA_LOSS, where + ": expected an object {dtype, shape}");
    if (v.find("safetensors_file") != nullptr)
        fail(ACCEL_ERR_UNIMPLEMENTED, where + ": entries pointing into a safetensors file (\"safetensors_file\") are "
                                              "not supported yet; only <name>.dat entries");
    for (const auto &m : v.members)
        if (m.first != "dtype" && m.first != "shape")
            fail(ACCEL_ERR_DATA_LOSS, where + ": unknown key \"" + m.first + "\" (expected dtype and shape)");
    const JsonValue *dtype = v.find("dtype");
    const JsonValue *shape = v.find("shape");
    if (dtype == nullptr || dtype->kind != JsonValue::Kind::String)
        fail(ACCEL_ERR_DATA_LOSS, where + ".dtype: expected a string");
    if (shape == nullptr || shape->kind != JsonValue::Kind::Array)
        fail(ACCEL_ERR_DATA_LOSS, where + ".shape: expected an array of integers");
    OffloadEntry e;
    e.name = name;
    bool known = false;
    for (const auto &[n, t] : dtype_names())
        if (dtype->text == n) {
            e.dtype = t;
            known = true;
        }
    if (!known) fail(ACCEL_ERR_DATA_LOSS, where + ".dtype: unknown dtype \"" + dtype->text + "\"");
    // Bounded so that numel * element size cannot overflow (2^62 bytes is beyond any file anyway).
    constexpr uint64_t kMaxBytes = uint64_t{1} << 62;
    uint64_t bytes = c10::elementSize(e.dtype);
    for (const auto &d : shape->items) {
        if (d.kind != JsonValue::Kind::Number || !d.is_uint)
            fail(ACCEL_ERR_DATA_LOSS, where + ".shape: expected non-negative integers");
        if (d.uint_value != 0 && bytes > kMaxBytes / d.uint_value)
            fail(ACCEL_ERR_DATA_LOSS, where + ".shape: the tensor would exceed 2^62 bytes");
        bytes *= d.uint_value;
        e.shape.push_back(static_cast<int64_t>(d.uint_value));
    }
    return e;
}

// The whole of [0, len) at `offset` with pread, retried on short reads.
void pread_all(int fd, void *dst, size_t len, const std::string &path)
{
    auto *p = static_cast<uint8_t *>(dst);
    size_t done = 0;
    while (done < len) {
        const ssize_t n = ::pread(fd, p + done, len - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail_errno(errno, "offload folder: reading", path);
        if (n == 0) fail(ACCEL_ERR_DATA_LOSS, "offload folder: " + path + " is shorter than its index.json entry says");
        done += static_cast<size_t>(n);
    }
}

class ReadFd {
public:
    explicit ReadFd(const std::string &path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC))
    {
        if (fd_ < 0) {
            if (errno == ENOENT) fail(ACCEL_ERR_DATA_LOSS, "offload folder: " + path + " is missing (listed in index.json)");
            fail_errno(errno, "offload folder: opening", path);
        }
    }
    ~ReadFd() { ::close(fd_); }
    ReadFd(const ReadFd &) = delete;
    ReadFd &operator=(const ReadFd &) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

} // namespace

int64_t OffloadEntry::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

size_t OffloadEntry::nbytes() const { return static_cast<size_t>(numel()) * c10::elementSize(dtype); }

std::string offload_dtype_name(at::ScalarType dtype, const std::string &what)
{
    for (const auto &[n, t] : dtype_names())
        if (t == dtype) return n;
    fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": dtype " + c10::toString(dtype) +
                                         " cannot be offloaded (Accelerate's offload folder holds NumPy's dtypes)");
}

std::vector<OffloadEntry> parse_offload_index(const char *text, size_t len, const std::string &what)
{
    const JsonValue root = parse_json(text, len, what);
    if (root.kind != JsonValue::Kind::Object)
        fail(ACCEL_ERR_DATA_LOSS, what + ": expected an object of tensor name -> {dtype, shape}");
    std::vector<OffloadEntry> out;
    out.reserve(root.members.size());
    for (const auto &[name, v] : root.members) out.push_back(parse_entry(name, v, what));
    return out;
}

std::string offload_index_json(const std::vector<OffloadEntry> &entries)
{
    // json.dump(index, f, indent=2)'s layout, for a folder that diffs cleanly against Python's.
    std::string s = "{";
    for (size_t i = 0; i < entries.size(); ++i) {
        const auto &e = entries[i];
        s += i ? ",\n  " : "\n  ";
        s += json_quote(e.name) + ": {\n    \"dtype\": \"" + offload_dtype_name(e.dtype, e.name) + "\",\n    \"shape\": [";
        for (size_t d = 0; d < e.shape.size(); ++d) s += (d ? ",\n      " : "\n      ") + std::to_string(e.shape[d]);
        s += e.shape.empty() ? "]\n  }" : "\n    ]\n  }";
    }
    s += entries.empty() ? "}" : "\n}";
    return s;
}

void offload_state_dict(const std::string &dir, const std::vector<std::pair<std::string, at::Tensor>> &tensors)
{
    make_dirs(dir);
    const std::string index_path = join(dir, kOffloadIndex);
    std::vector<OffloadEntry> index;
    if (exists(index_path)) {
        const std::string text = read_small_file(index_path, size_t{1} << 30);
        index = parse_offload_index(text.data(), text.size(), index_path);
    }
    std::map<std::string, size_t> at_of;
    for (size_t i = 0; i < index.size(); ++i) at_of[index[i].name] = i;
    for (const auto &[name, tensor] : tensors) {
        if (!usable_file_name(name))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "offload folder: tensor name \"" + name + "\" is not a usable file name");
        OffloadEntry e{name, tensor.scalar_type(), tensor.sizes().vec()};
        offload_dtype_name(e.dtype, name); // refused before anything is written for it
        const at::Tensor bytes = tensor.detach().to(at::kCPU).contiguous();
        OutFile f(join(dir, name + ".dat"));
        f.write(bytes.data_ptr(), e.nbytes());
        f.close();
        auto it = at_of.find(name);
        if (it != at_of.end()) {
            index[it->second] = std::move(e);
        } else {
            at_of[name] = index.size();
            index.push_back(std::move(e));
        }
    }
    const std::string json = offload_index_json(index);
    write_file_durably(index_path, json.data(), json.size());
}

OffloadFolder::OffloadFolder(const std::string &dir) : dir_(dir)
{
    const std::string index_path = join(dir, kOffloadIndex);
    if (!is_dir(dir)) fail(ACCEL_ERR_NOT_FOUND, "offload folder: " + dir + " is not a folder");
    if (!exists(index_path)) fail(ACCEL_ERR_NOT_FOUND, "offload folder: " + index_path + " is missing");
    const std::string text = read_small_file(index_path, size_t{1} << 30);
    entries_ = parse_offload_index(text.data(), text.size(), index_path);
    for (const auto &e : entries_) {
        const std::string path = file_of(e);
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) {
            if (errno == ENOENT) fail(ACCEL_ERR_DATA_LOSS, "offload folder: " + path + " is missing (listed in index.json)");
            fail_errno(errno, "offload folder: reading", path);
        }
        // Exactly the entry's bytes (what offload_weight's np.memmap writes); a 0-d tensor is one element.
        if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != e.nbytes())
            fail(ACCEL_ERR_DATA_LOSS, "offload folder: " + path + " holds " + std::to_string(st.st_size) +
                                          " bytes where index.json's entry (" + offload_dtype_name(e.dtype, e.name) +
                                          ", " + std::to_string(e.numel()) + " elements) needs " +
                                          std::to_string(e.nbytes()));
    }
}

const OffloadEntry *OffloadFolder::find(const std::string &name) const
{
    for (const auto &e : entries_)
        if (e.name == name) return &e;
    return nullptr;
}

const OffloadEntry &OffloadFolder::entry(const std::string &name) const
{
    const OffloadEntry *e = find(name);
    if (e == nullptr)
        fail(ACCEL_ERR_NOT_FOUND, "offload folder: " + join(dir_, kOffloadIndex) + " has no entry \"" + name + "\"");
    return *e;
}

std::string OffloadFolder::file_of(const OffloadEntry &e) const { return join(dir_, e.name + ".dat"); }

at::Tensor OffloadFolder::load(const std::string &name) const
{
    const OffloadEntry &e = entry(name);
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    load_into(name, t);
    return t;
}

void OffloadFolder::load_into(const std::string &name, const at::Tensor &dst) const
{
    const OffloadEntry &e = entry(name);
    if (dst.sizes() != at::IntArrayRef(e.shape))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "offload folder: \"" + name + "\" has shape " + c10::str(at::IntArrayRef(e.shape)) +
                                             " in " + dir_ + ", the destination " + c10::str(dst.sizes()));
    const std::string path = file_of(e);
    ReadFd fd(path);
    const bool direct = dst.device().is_cpu() && dst.scalar_type() == e.dtype && dst.is_contiguous();
    at::Tensor buf = direct ? dst : at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    if (e.nbytes() > 0) pread_all(fd.get(), buf.data_ptr(), e.nbytes(), path);
    if (!direct) {
        at::NoGradGuard no_grad;
        dst.copy_(buf);
    }
}

} // namespace accel::big_modeling
