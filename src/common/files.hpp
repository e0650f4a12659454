// Durable file and folder operations (no LibTorch): whole writes with fsync, read-only memory maps, the
// temporary-sibling-folder protocol of save_state (atomic folders), and recursive removal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <vector>

namespace accel {

// An open file descriptor for writing a new file; close() fsyncs before closing. While writing, it asks
// the kernel to start writeback of every completed 64 MiB (sync_file_range, SYNC_FILE_RANGE_WRITE, which
// does not wait), so the disk works while later bytes are still being copied and the final fsync has
// little left to do. Errors throw accel::Error (PERMISSION_DENIED, NOT_FOUND, RESOURCE_EXHAUSTED for a
// full disk, else INTERNAL).
class OutFile {
public:
    explicit OutFile(const std::string &path);
    ~OutFile();
    OutFile(const OutFile &) = delete;
    OutFile &operator=(const OutFile &) = delete;
    void write(const void *data, size_t len);
    // pwrite at `offset` (same argument order as MappedFile::read_at); may be called from several threads
    // at once for disjoint ranges (not mixed with write()). Starts writeback of the range once written
    // (each call's range: the callers write pieces of at most kIoPiece).
    void write_at(const void *data, uint64_t offset, size_t len) const;
    // Bytes written with write() (write_at() does not count: its ranges may come in any order).
    uint64_t size() const { return written_; }
    void close(); // fsync + close; errors are reported here
    const std::string &path() const { return path_; }

private:
    std::string path_;
    int fd_ = -1;
    uint64_t written_ = 0;
    uint64_t flushed_ = 0; // bytes before this offset have had writeback started
};

// A file mapped copy-on-write (MAP_PRIVATE; read-only shared for Access::Random): the file is never
// modified. Empty files map to null, size 0.
// The descriptor stays open so that large ranges can be read with read_at() straight into their
// destination (one copy, no page-table work), instead of through the map.
class MappedFile {
public:
    // How the map will be read: front to back once (checkpoints: the kernel starts reading the whole file at
    // once), or scattered (datasets larger than memory: no read-ahead of the file, and a read-only shared map,
    // which costs no commit charge, where a writable private map larger than RAM + swap is refused).
    enum class Access { Sequential, Random };
    explicit MappedFile(const std::string &path, Access access = Access::Sequential);
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;
    const uint8_t *data() const { return data_; }
    size_t size() const { return size_; }
    const std::string &path() const { return path_; }
    // Reads `len` bytes at `offset` into `dst` with pread; DATA_LOSS if the file has become shorter,
    // INTERNAL for an I/O error.
    void read_at(void *dst, size_t offset, size_t len) const;

private:
    std::string path_;
    int fd_ = -1;
    const uint8_t *data_ = nullptr;
    size_t size_ = 0;
};

void write_file_durably(const std::string &path, const void *data, size_t len);
std::string read_small_file(const std::string &path, size_t max_bytes);
void fsync_dir(const std::string &dir);
bool exists(const std::string &path);
bool is_dir(const std::string &path);
bool is_regular_file(const std::string &path);
void make_dirs(const std::string &path);
void remove_all(const std::string &path);
// remove_all for a checkpoint folder: its files are unlinked concurrently first (freeing a large file's
// page-cache pages and disk blocks takes a while, ~0.1 s for 256 MB), then the rest is removed.
void remove_checkpoint_folder(const std::string &path);
// Names in `dir` (not "." / ".."), unsorted.
std::vector<std::string> list_dir(const std::string &dir);
std::string join(const std::string &a, const std::string &b);
std::string parent_of(const std::string &path);
std::string basename_of(const std::string &path);
// "~" and "~/..." expanded with $HOME; trailing slashes removed.
std::string normalize_path(const std::string &path);

// The temporary sibling of `target` used while a checkpoint is written: "<parent>/.<name>.accel-tmp".
std::string temp_sibling(const std::string &target);
bool is_temp_name(const std::string &name);
// Makes `tmp` (complete, fsynced) appear as `target` in one step: rename when `target` does not exist,
// else an atomic exchange (renameat2 RENAME_EXCHANGE) followed by removal of the old folder. Entries of an
// existing `target` other than the plain files and folders `replaced(name, folder)` claims (an earlier
// checkpoint's) are the user's: they are hard-linked into `tmp` before the exchange (files, and folders
// recursively), so they survive it and a crash at any point leaves them in `target`. A user's entry under a
// name `tmp` holds is refused (ACCEL_ERR_ALREADY_EXISTS) rather than lost. The parent folder is fsynced after.
void publish_dir(const std::string &tmp, const std::string &target,
                 const std::function<bool(const std::string &name, bool folder)> &replaced);

// Errors from errno as accel::Error with a message naming `what` and `path`.
[[noreturn]] void fail_errno(int err, const std::string &what, const std::string &path);

} // namespace accel
