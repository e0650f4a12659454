// The .npy header parser (accel_dataloader_create_from_files' "npy" format): the input is a whole .npy
// file. An accepted header must describe exactly the bytes after it; the file is then also opened as a
// sample dataset and its first sample read (when it has one).
#include "fuzz_common.hpp"

#include "config/dataloader_options.hpp"
#include "data_loader/file_datasets.hpp"
#include "data_loader/file_formats.hpp"

#include <fstream>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    fuzz::current_input().assign(reinterpret_cast<const char *>(data), size);
    NpyHeader h;
    if (!fuzz::accepts([&] { h = parse_npy_header(data, size, size, "fuzz.npy"); })) return 0;
    uint64_t bytes = elem_size(h.type);
    for (int64_t d : h.shape) bytes *= static_cast<uint64_t>(d);
    if (h.data_offset > size || bytes != size - h.data_offset) fuzz::finding("an accepted header does not match the file size");

    static const std::string path = "/tmp/accel_fuzz_npy_" + std::to_string(::getpid()) + ".npy";
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
    }
    config::FileDataLoaderOptions o;
    o.format = config::FileDataLoaderOptions::Format::Npy;
    o.features = path;
    fuzz::accepts([&] {
        auto d = open_file_dataset(o);
        if (d->size() > 0) d->get_batch(at::zeros({1}, at::kLong));
    });
    return 0;
}
