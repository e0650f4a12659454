#include "data_loader/file_datasets.hpp"

#include "checkpointing/safetensors_format.hpp"
#include "common/error.hpp"
#include "data_loader/document_windows.hpp"

#include <algorithm>
#include <cstring>
#include <glob.h>

namespace accel {

namespace {

// Widens `count` elements of `type` that lie in the last count * size bytes of `dst` into int64, in place
// from the front: element i's 8 bytes end at or before element i + 1's source bytes begin, so nothing is
// overwritten before it is read.
void widen_in_place(int64_t *dst, uint64_t count, ElemType type)
{
    const size_t es = elem_size(type);
    const uint8_t *src = reinterpret_cast<const uint8_t *>(dst) + count * (8 - es);
    auto widen = [&](auto sample) {
        using T = decltype(sample);
        for (uint64_t i = 0; i < count; ++i) {
            T v;
            std::memcpy(&v, src + i * sizeof(T), sizeof(T));
            dst[i] = static_cast<int64_t>(v);
        }
    };
    switch (type) {
    case ElemType::U8: return widen(uint8_t{});
    case ElemType::I8: return widen(int8_t{});
    case ElemType::U16: return widen(uint16_t{});
    case ElemType::I16: return widen(int16_t{});
    case ElemType::U32: return widen(uint32_t{});
    case ElemType::I32: return widen(int32_t{});
    case ElemType::U64: return widen(uint64_t{});
    case ElemType::I64: return; // already in place (count * (8 - 8) = 0)
    default: fail(ACCEL_ERR_INTERNAL, std::string("tokens of type ") + elem_name(type));
    }
}

at::ScalarType scalar_type(ElemType t, const std::string &what)
{
    switch (t) {
    case ElemType::Bool: return at::kBool;
    case ElemType::U8: return at::kByte;
    case ElemType::I8: return at::kChar;
    case ElemType::I16: return at::kShort;
    case ElemType::I32: return at::kInt;
    case ElemType::I64: return at::kLong;
    case ElemType::F16: return at::kHalf;
    case ElemType::BF16: return at::kBFloat16;
    case ElemType::F32: return at::kFloat;
    case ElemType::F64: return at::kDouble;
    default:
        // LibTorch 1.13 has no unsigned type wider than a byte.
        fail(ACCEL_ERR_UNIMPLEMENTED, what + ": " + elem_name(t) + " samples have no LibTorch dtype (token streams of " +
                                          elem_name(t) + " are widened to int64; sample tensors are not)");
    }
}

int64_t checked_index(const int64_t *idx, int64_t i, int64_t size)
{
    const int64_t k = idx[i];
    if (k < 0 || k >= size)
        fail(ACCEL_ERR_OUT_OF_RANGE, "dataset: sample index " + std::to_string(k) + " outside [0, " +
                                         std::to_string(size) + ")");
    return k;
}

} // namespace

TokenStream::TokenStream(std::vector<FileSpan> spans) : spans_(std::move(spans))
{
    for (const auto &s : spans_) {
        if (!elem_is_integer(s.type))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "\"" + s.file->path() + "\": tokens must be integers, got " + elem_name(s.type));
        starts_.push_back(total_);
        total_ += s.count;
    }
}

void TokenStream::read(uint64_t start, uint64_t count, int64_t *dst) const
{
    if (start + count > total_ || start + count < start)
        fail(ACCEL_ERR_OUT_OF_RANGE, "tokens [" + std::to_string(start) + ", +" + std::to_string(count) +
                                         ") outside the stream of " + std::to_string(total_));
    // The span holding `start`: the last one beginning at or before it (empty spans are skipped over).
    size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    while (count > 0) {
        const FileSpan &s = spans_[k];
        const uint64_t at = start - starts_[k];
        const uint64_t n = std::min(count, s.count - at);
        if (n > 0) {
            const size_t es = elem_size(s.type);
            // Into the tail of this stretch of dst, then widened forward (no staging buffer).
            uint8_t *raw = reinterpret_cast<uint8_t *>(dst) + n * (8 - es);
            s.file->read_at(raw, s.offset + at * es, n * es);
            widen_in_place(dst, n, s.type);
        }
        dst += n;
        start += n;
        count -= n;
        ++k;
    }
}

TokenWindowDataset::TokenWindowDataset(TokenStream stream, int64_t block_size, int64_t stride)
    : stream_(std::move(stream)), block_size_(block_size), stride_(stride),
      windows_(num_token_windows(static_cast<int64_t>(stream_.size()), block_size, stride))
{
}

Batch TokenWindowDataset::get_batch(const at::Tensor &indices) const
{
    const at::Tensor idx = indices.to(at::kLong).contiguous();
    const int64_t n = idx.numel(), w = block_size_ + 1;
    Batch b;
    // Contiguous, as create_from_tokens' index_select makes them; each window goes through a small buffer that
    // stays in cache, so the batch's memory is written once (measured: a [n, w] tensor narrowed and copied
    // twice cost more than the reads).
    b.inputs = at::empty({n, block_size_}, at::kLong);
    b.labels = at::empty({n, block_size_}, at::kLong);
    int64_t *in = b.inputs.data_ptr<int64_t>(), *lab = b.labels.data_ptr<int64_t>();
    std::vector<int64_t> window(static_cast<size_t>(w));
    const size_t row = static_cast<size_t>(block_size_) * sizeof(int64_t);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t k = checked_index(idx.data_ptr<int64_t>(), i, windows_);
        stream_.read(static_cast<uint64_t>(k * stride_), static_cast<uint64_t>(w), window.data());
        std::memcpy(in + i * block_size_, window.data(), row);
        std::memcpy(lab + i * block_size_, window.data() + 1, row);
    }
    return b;
}

FileTensorDataset::FileTensorDataset(FileTensor features, std::optional<FileTensor> labels)
    : features_(std::move(features)), labels_(std::move(labels))
{
    for (const FileTensor *t : {&features_, labels_ ? &*labels_ : nullptr}) {
        if (t == nullptr) continue;
        if (t->shape.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, t->what + ": a scalar has no samples (dimension 0)");
        // Samples of no elements would let a tiny header claim any number of them (an index of 10^12 entries).
        for (size_t d = 1; d < t->shape.size(); ++d)
            if (t->shape[d] == 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, t->what + ": samples of no elements (dimension " + std::to_string(d) + " is 0)");
        scalar_type(t->span.type, t->what); // refused now rather than at the first batch
    }
    if (labels_ && labels_->shape[0] != features_.shape[0])
        fail(ACCEL_ERR_INVALID_ARGUMENT, labels_->what + ": " + std::to_string(labels_->shape[0]) + " samples, " +
                                             features_.what + " has " + std::to_string(features_.shape[0]));
}

namespace {
at::Tensor read_rows(const FileTensor &t, const at::Tensor &idx)
{
    std::vector<int64_t> shape = t.shape;
    shape[0] = idx.numel();
    at::Tensor out = at::empty(shape, at::TensorOptions().dtype(scalar_type(t.span.type, t.what)));
    uint64_t row = elem_size(t.span.type); // bytes per sample (the file's layout is C order)
    for (size_t d = 1; d < t.shape.size(); ++d) row *= static_cast<uint64_t>(t.shape[d]);
    uint8_t *dst = static_cast<uint8_t *>(out.data_ptr());
    for (int64_t i = 0; i < idx.numel(); ++i) {
        const int64_t k = checked_index(idx.data_ptr<int64_t>(), i, t.shape[0]);
        t.span.file->read_at(dst + i * row, t.span.offset + static_cast<uint64_t>(k) * row, row);
    }
    return out;
}
} // namespace

Batch FileTensorDataset::get_batch(const at::Tensor &indices) const
{
    const at::Tensor idx = indices.to(at::kLong).contiguous();
    Batch b;
    b.inputs = read_rows(features_, idx);
    if (labels_) b.labels = read_rows(*labels_, idx);
    return b;
}

namespace {

using config::FileDataLoaderOptions;

std::shared_ptr<MappedFile> open_data_file(const std::string &path)
{
    return std::make_shared<MappedFile>(normalize_path(path), MappedFile::Access::Random);
}

// glob(3)'s error callback has no user pointer: the folder it could not read and why, for the message.
thread_local std::string t_glob_path;
thread_local int t_glob_errno = 0;

int remember_glob_error(const char *path, int err)
{
    t_glob_path = path;
    t_glob_errno = err;
    return 1; // stop: GLOB_ERR fails the pattern anyway
}

// Each entry as it is, or the files a glob pattern matches (sorted, as glob sorts them: shard order).
std::vector<std::string> expand(const std::vector<std::string> &patterns)
{
    std::vector<std::string> out;
    for (const auto &p : patterns) {
        if (p.find_first_of("*?[") == std::string::npos) {
            out.push_back(p);
            continue;
        }
        glob_t g{};
        // GLOB_ERR: a folder that cannot be read fails the pattern rather than silently dropping its shards.
        const int rc = ::glob(normalize_path(p).c_str(), GLOB_ERR, remember_glob_error, &g);
        if (rc == 0)
            for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
        ::globfree(&g);
        if (rc == GLOB_NOMATCH) fail(ACCEL_ERR_NOT_FOUND, "files: no file matches \"" + p + "\"");
        if (rc == GLOB_ABORTED) fail_errno(t_glob_errno, "files: \"" + p + "\" cannot be expanded: cannot read folder", t_glob_path);
        if (rc == GLOB_NOSPACE) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "files: out of memory expanding \"" + p + "\"");
        if (rc != 0) fail(ACCEL_ERR_INTERNAL, "files: cannot expand \"" + p + "\" (glob error " + std::to_string(rc) + ")");
    }
    return out;
}

std::string quoted(const std::string &path) { return "\"" + path + "\""; }

// The first bytes of a file, for its header.
std::vector<uint8_t> head(const MappedFile &f, size_t max)
{
    std::vector<uint8_t> buf(std::min<size_t>(max, f.size()));
    f.read_at(buf.data(), 0, buf.size());
    return buf;
}

void check_dtype(const FileDataLoaderOptions &o, ElemType found, const std::string &what)
{
    if (!o.dtype.empty() && o.dtype != elem_name(found))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "dtype: \"" + o.dtype + "\" given, but " + what + " holds " + elem_name(found));
}

ElemType raw_token_type(const std::string &name)
{
    auto t = elem_from_name(name);
    if (!t || !elem_is_integer(*t))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "dtype: expected an integer type (\"uint8\", \"uint16\", \"int32\", \"int64\", "
                                         "\"int8\", \"int16\", \"uint32\" or \"uint64\"), got \"" + name + "\"");
    return *t;
}

FileTensor npy_tensor(const std::string &path)
{
    FileTensor t;
    t.span.file = open_data_file(path);
    t.what = quoted(path);
    const auto bytes = head(*t.span.file, kMaxNpyHeaderBytes + 12);
    NpyHeader h = parse_npy_header(bytes.data(), bytes.size(), t.span.file->size(), t.what);
    t.span.offset = h.data_offset;
    t.span.count = h.numel();
    t.span.type = h.type;
    t.shape = h.shape;
    return t;
}

ElemType from_st(ckpt::StDtype d, const std::string &what)
{
    using ckpt::StDtype;
    switch (d) {
    case StDtype::BOOL: return ElemType::Bool;
    case StDtype::U8: return ElemType::U8;
    case StDtype::I8: return ElemType::I8;
    case StDtype::U16: return ElemType::U16;
    case StDtype::I16: return ElemType::I16;
    case StDtype::U32: return ElemType::U32;
    case StDtype::I32: return ElemType::I32;
    case StDtype::U64: return ElemType::U64;
    case StDtype::I64: return ElemType::I64;
    case StDtype::F16: return ElemType::F16;
    case StDtype::BF16: return ElemType::BF16;
    case StDtype::F32: return ElemType::F32;
    case StDtype::F64: return ElemType::F64;
    default: fail(ACCEL_ERR_UNIMPLEMENTED, what + ": dtype " + ckpt::st_dtype_name(d) + " is not read as data");
    }
}

// Tensor `name` of an opened safetensors file whose header is `h`.
FileTensor st_tensor(const std::shared_ptr<MappedFile> &file, const ckpt::StHeader &h, const std::string &name)
{
    const ckpt::StTensorInfo *info = h.find(name);
    if (info == nullptr) {
        std::string names;
        for (const auto &t : h.tensors) names += (names.empty() ? "" : ", ") + t.name;
        fail(ACCEL_ERR_NOT_FOUND, quoted(file->path()) + ": no tensor \"" + name + "\" (it holds: " + names + ")");
    }
    FileTensor t;
    t.span.file = file;
    t.what = quoted(file->path()) + ": tensor \"" + name + "\"";
    t.span.type = from_st(info->dtype, t.what);
    t.span.offset = h.data_start() + info->begin;
    t.span.count = ckpt::st_numel(info->shape, t.what);
    for (uint64_t d : info->shape) t.shape.push_back(static_cast<int64_t>(d));
    return t;
}

ckpt::StHeader st_header(const MappedFile &f)
{
    const auto prefix = head(f, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0 && prefix.size() == 8; --i) n = (n << 8) | prefix[static_cast<size_t>(i)];
    // The parser checks n against the file and the cap; reading more than the cap is never needed.
    const auto bytes = head(f, 8 + static_cast<size_t>(std::min<uint64_t>(n, ckpt::kMaxHeaderBytes)));
    return ckpt::parse_st_header(bytes.data(), f.size(), quoted(f.path()));
}

FileSpan token_span(const FileDataLoaderOptions &o, const std::string &path)
{
    switch (o.format) {
    case FileDataLoaderOptions::Format::Tokens: {
        FileSpan s;
        s.file = open_data_file(path);
        s.type = raw_token_type(o.dtype);
        const size_t es = elem_size(s.type);
        if (s.file->size() % es != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, quoted(path) + ": " + std::to_string(s.file->size()) + " bytes are not a whole number of " +
                                                 o.dtype + " tokens (is dtype right?)");
        s.count = s.file->size() / es;
        return s;
    }
    case FileDataLoaderOptions::Format::Npy: {
        FileTensor t = npy_tensor(path);
        if (t.shape.size() != 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, t.what + ": a token stream must be a 1-d array, got " +
                                                 std::to_string(t.shape.size()) + " dimensions");
        check_dtype(o, t.span.type, t.what);
        return t.span;
    }
    case FileDataLoaderOptions::Format::Safetensors: {
        auto file = open_data_file(path);
        FileTensor t = st_tensor(file, st_header(*file), o.tensor);
        if (t.shape.size() != 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, t.what + ": a token stream must be 1-d, got " + std::to_string(t.shape.size()) +
                                                 " dimensions");
        check_dtype(o, t.span.type, t.what);
        return t.span;
    }
    }
    fail(ACCEL_ERR_INTERNAL, "format");
}

} // namespace

std::shared_ptr<const Dataset> open_file_dataset(const FileDataLoaderOptions &o)
{
    // A wrong dtype name is the config's error, reported before any file is looked at.
    if (o.format == FileDataLoaderOptions::Format::Tokens) raw_token_type(o.dtype);
    else if (!o.dtype.empty() && !elem_from_name(o.dtype))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "dtype: unknown type \"" + o.dtype + "\" (numpy's names: \"uint16\", \"float32\", ...)");
    if (o.samples()) {
        if (o.format == FileDataLoaderOptions::Format::Npy) {
            FileTensor f = npy_tensor(o.features);
            check_dtype(o, f.span.type, f.what);
            std::optional<FileTensor> l;
            if (!o.labels.empty()) l = npy_tensor(o.labels);
            return std::make_shared<FileTensorDataset>(std::move(f), std::move(l));
        }
        auto file = open_data_file(o.file);
        const ckpt::StHeader h = st_header(*file);
        FileTensor f = st_tensor(file, h, o.features);
        check_dtype(o, f.span.type, f.what);
        std::optional<FileTensor> l;
        if (!o.labels.empty()) l = st_tensor(file, h, o.labels);
        return std::make_shared<FileTensorDataset>(std::move(f), std::move(l));
    }
    std::vector<FileSpan> spans;
    for (const auto &path : expand(o.files)) spans.push_back(token_span(o, path));
    TokenStream stream(std::move(spans));
    // Also with document boundaries: a window longer than the whole stream would be padding only (and a
    // block_size of 2^31 would allocate batches of that width).
    const uint64_t window = static_cast<uint64_t>(o.block_size) + 1;
    if (stream.size() < window)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "files: " + std::to_string(stream.size()) +
                                             " tokens do not make one sequence of block_size + 1 = " + std::to_string(window));
    if (o.eos_token_id) {
        DocumentWindowOptions d{o.block_size, o.stride, *o.eos_token_id, o.pad_token_id, o.label_pad_token_id};
        return std::make_shared<DocumentWindowDataset>(std::move(stream), d);
    }
    return std::make_shared<TokenWindowDataset>(std::move(stream), o.block_size, o.stride);
}

} // namespace accel
