// Checkpoint integrity (issue 42.3): damaged files are DATA_LOSS naming them, never loaded.
//  - torch.save archives: every stored member's CRC-32 is checked against the zip's central directory
//    (storages are read through their offsets, which bypasses miniz's own check);
//  - every file save_state writes gets a CRC-32 (zlib) and its size recorded beside it: in a SHARDED folder's
//    metadata.json, in accel_checksums.json in every other folder (plain save_state folders, DeepSpeed tag
//    folders). Each such record carries a CRC-32 of itself ("self_crc32"), so an edit to it is found too.
// Files without a record (written by Accelerate, DeepSpeed or an older accel) load as before.
// ACCEL_CHECKPOINT_VERIFY=0 skips every check. No LibTorch.
#pragma once

#include "common/files.hpp"
#include "common/json_reader.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel::ckpt {

// The record of a folder's files, in folders that have no metadata file of their own.
constexpr const char *kChecksumManifest = "accel_checksums.json";

// False when ACCEL_CHECKPOINT_VERIFY is "0", "false", "no" or "off" (any case); read on every call.
bool checkpoint_verification_enabled();

struct FileSum {
    uint64_t size = 0;
    uint32_t crc32 = 0;
};
using FileSums = std::map<std::string, FileSum>; // by name inside one folder

// CRC-32 of bytes [offset, offset + len) of `f`, read with pread (pieces on several threads, joined with
// crc32_combine); DATA_LOSS if the file has become shorter.
uint32_t crc32_of(const MappedFile &f, uint64_t offset, uint64_t len);
FileSum file_sum(const std::string &path);

// ---- records -----------------------------------------------------------------------------------------

// `object_text` (a JSON object ending in '}') with "checksums" (name -> {"size", "crc32"}) and "self_crc32"
// members added last.
std::string seal_checksums(const std::string &object_text, const FileSums &sums);
// The "checksums" of a record read as `text` (parsed as `root`): nullopt when it has none; DATA_LOSS naming
// `path` when its self_crc32 does not match its text or the member is malformed.
std::optional<FileSums> read_sealed_checksums(const std::string &text, const JsonValue &root, const std::string &path);
// accel_checksums.json's text for `sums`.
std::string manifest_text(const FileSums &sums);
// The files a manifest lists (its text already read; DATA_LOSS naming `path` when damaged or foreign).
FileSums parse_manifest(const std::string &text, const std::string &path);

// Each file of `sums` in `dir`: DATA_LOSS naming the first that is missing, has another size or another
// CRC-32. Verified files are trusted by load_torch_file while a TrustScope lives on this thread.
void verify_files(const std::string &dir, const FileSums &sums);
// Reads <dir>/accel_checksums.json, when there is one, and verifies what it lists (those files `wanted`
// accepts, when given: what this process reads). Nothing when verification is off.
void verify_folder_manifest(const std::string &dir,
                            const std::function<bool(const std::string &name)> &wanted = nullptr);

// While alive, files verify_files checked on this thread skip the zip CRC pass (same bytes, read once).
class TrustScope {
public:
    TrustScope();
    ~TrustScope();
    TrustScope(const TrustScope &) = delete;
    TrustScope &operator=(const TrustScope &) = delete;

private:
    bool owner_; // false inside another scope, which keeps the set
};
bool is_trusted(const std::string &path);

// ---- zip -----------------------------------------------------------------------------------------------

struct ZipMember {
    std::string name;
    uint32_t crc32 = 0;
    uint16_t method = 0;
    uint64_t size = 0;        // uncompressed
    uint64_t stored_size = 0; // compressed
    uint64_t data_offset = 0; // of its first data byte (past the local header)
};
// The members listed in the central directory of the zip in `data` (zip64 included); DATA_LOSS naming
// `path` for anything malformed or out of the file's bounds.
std::vector<ZipMember> zip_members(const uint8_t *data, size_t size, const std::string &path);
// Every stored member's bytes against its CRC-32 (compressed ones are checked by the extractor).
void verify_zip_crcs(const MappedFile &f);

// ---- saving ----------------------------------------------------------------------------------------------

// A process's note of the files it wrote into the temporary folder `tmp` (names relative to it), for the
// main process to seal. Written durably.
void note_written_files(const std::string &tmp, const std::vector<std::string> &names);
// Main, before publishing: merges every process's note into each folder's record (SHARDED metadata.json, or
// accel_checksums.json), and removes the notes.
void seal_checkpoint_folder(const std::string &tmp);

} // namespace accel::ckpt
