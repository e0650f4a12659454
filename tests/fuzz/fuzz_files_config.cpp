// The file data loader's config JSON (accel_dataloader_create_from_files) over fixed files in a folder of
// its own (the working directory, so relative names and globs in the input find them): uint16 token shards
// t0.bin / t1.bin, a 1-d int32 t.npy, x.npy / y.npy samples and d.safetensors (tokens "tok", samples "x",
// "y"). Accepted loaders are iterated for up to two passes.
#include "fuzz_common.hpp"

#include "checkpointing/safetensors_format.hpp"

#include <accel/dataloader.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

void put(const std::string &name, const std::string &bytes)
{
    std::ofstream f(name, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string npy(const std::string &descr, const std::string &shape, const std::string &data)
{
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::string out("\x93NUMPY\x01\x00", 8);
    out += static_cast<char>(h.size());
    out += '\0';
    return out + h + data;
}

template <class T>
std::string bytes_of(const std::vector<T> &v)
{
    return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

void make_files()
{
    char dir[] = "/tmp/accel_fuzz_files_XXXXXX";
    if (::mkdtemp(dir) == nullptr || ::chdir(dir) != 0) accel::fuzz::finding("cannot make the fixed files' folder");
    std::vector<uint16_t> t0(300), t1(200);
    for (size_t i = 0; i < t0.size(); ++i) t0[i] = static_cast<uint16_t>(i * 7);
    for (size_t i = 0; i < t1.size(); ++i) t1[i] = static_cast<uint16_t>(i * 11);
    put("t0.bin", bytes_of(t0));
    put("t1.bin", bytes_of(t1));
    std::vector<int32_t> t(100);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
    put("t.npy", npy("<i4", "(100,)", bytes_of(t)));
    std::vector<float> x(20 * 3);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    std::vector<int64_t> y(20);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>(i % 4);
    put("x.npy", npy("<f4", "(20, 3)", bytes_of(x)));
    put("y.npy", npy("<i8", "(20,)", bytes_of(y)));
    const std::string xb = bytes_of(x), yb = bytes_of(y), tb = bytes_of(t0);
    std::vector<accel::ckpt::StWriteEntry> e(3);
    e[0] = {"x", accel::ckpt::StDtype::F32, {20, 3}, xb.size(), xb.data()};
    e[1] = {"y", accel::ckpt::StDtype::I64, {20}, yb.size(), yb.data()};
    e[2] = {"tok", accel::ckpt::StDtype::U16, {300}, tb.size(), tb.data()};
    std::string st = accel::ckpt::build_st_header(e, nullptr);
    for (const auto &w : e) st.append(static_cast<const char *>(w.data), w.nbytes);
    put("d.safetensors", st);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    static bool ready = [] {
        make_files();
        return true;
    }();
    (void)ready;
    const std::string text = fuzz::text_of(data, size);
    accel_dataloader_t *dl = nullptr;
    if (fuzz::status_ok(accel_dataloader_create_from_files(text.c_str(), &dl))) {
        int64_t len = 0;
        fuzz::status_ok(accel_dataloader_get_length(dl, &len));
        int passes = 0;
        for (int i = 0; i < 64 && passes < 2; ++i) {
            accel_batch_t *b = nullptr;
            if (!fuzz::status_ok(accel_dataloader_next(dl, &b))) break;
            if (b == nullptr) {
                ++passes;
                continue;
            }
            accel_batch_free(b);
        }
    }
    accel_dataloader_free(dl);
    return 0;
}
