// The integrity records of a checkpoint (src/checkpointing/integrity.*): accel_checksums.json and the
// "checksums" section of a SHARDED metadata.json (each sealed by its own CRC-32), the files they list checked in
// a scratch folder (only names inside it may be opened), and a zip's central directory as load_torch_file walks
// it before checking each member's CRC-32.
#include "checkpointing/integrity.hpp"
#include "fuzz_common.hpp"

#include <unistd.h>

namespace {

// A folder holding one file, "a" (3 bytes), for the names a record lists.
const std::string &scratch_folder()
{
    static const std::string dir = [] {
        const std::string d = std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/accel-fuzz-sums-" +
                              std::to_string(getpid());
        accel::make_dirs(d);
        accel::write_file_durably(accel::join(d, "a"), "abc", 3);
        return d;
    }();
    return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string text = accel::fuzz::text_of(data, size);
    accel::ckpt::FileSums sums;
    if (accel::fuzz::accepts([&] { sums = accel::ckpt::parse_manifest(text, "accel_checksums.json"); })) {
        for (const auto &[name, sum] : sums)
            if (name.find('/') != std::string::npos || name == ".." || name == ".")
                accel::fuzz::finding("a record naming \"" + name + "\" was accepted");
        accel::fuzz::accepts([&] { accel::ckpt::verify_files(scratch_folder(), sums); });
    }
    // A SHARDED metadata.json's section: any JSON object with or without it.
    accel::fuzz::accepts([&] {
        const accel::JsonValue root = accel::parse_json(text.data(), text.size(), "metadata.json");
        accel::ckpt::read_sealed_checksums(text, root, "metadata.json");
    });
    accel::fuzz::accepts([&] {
        for (const auto &m : accel::ckpt::zip_members(data, size, "archive.pt"))
            if (m.data_offset > size || m.stored_size > size - m.data_offset)
                accel::fuzz::finding("a zip member outside the file was accepted: " + m.name);
    });
    return 0;
}
