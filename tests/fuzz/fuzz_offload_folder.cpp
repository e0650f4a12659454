// Accelerate's offload folder reader (big_modeling/offload_folder; accel_model_dispatch with an existing folder):
// index.json's names, dtypes and shapes, and the .dat files' sizes, all from untrusted bytes. The input is
// index.json's text, then (after a NUL byte, if any) the bytes every listed <name>.dat is given.
#include "big_modeling/offload_folder.hpp"
#include "common/files.hpp"
#include "fuzz_common.hpp"

#include <ATen/ATen.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    static const std::string dir = "/tmp/accel_fuzz_offload_" + std::to_string(getpid());
    const std::string input(reinterpret_cast<const char *>(data), size);
    fuzz::current_input() = input;
    const size_t cut = input.find('\0');
    const std::string index = input.substr(0, cut);
    const std::string dat = cut == std::string::npos ? std::string() : input.substr(cut + 1);
    remove_all(dir);
    make_dirs(dir);
    std::ofstream(dir + "/index.json", std::ios::binary) << index;
    // Give every usable name the same .dat bytes (names the parser refuses are never opened).
    fuzz::accepts([&] {
        for (const auto &e : big_modeling::parse_offload_index(index.data(), index.size(), "index.json")) {
            if (e.name.size() > 200) continue; // beyond NAME_MAX: the open fails, which the reader reports
            std::ofstream(dir + "/" + e.name + ".dat", std::ios::binary) << dat;
        }
    });
    fuzz::accepts([&] {
        big_modeling::OffloadFolder folder(dir);
        // Every tensor of an accepted folder loads in full (the sizes were checked at open).
        for (const auto &e : folder.entries())
            if (e.nbytes() <= (size_t{1} << 24)) (void)folder.load(e.name).sum();
    });
    return 0;
}
