#include "common/files.hpp"

#include "common/job_pool.hpp"

#include "common/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace accel {

namespace fs = std::filesystem;

void fail_errno(int err, const std::string &what, const std::string &path)
{
    accel_status_t code = ACCEL_ERR_INTERNAL;
    switch (err) {
    case ENOENT: case ENOTDIR: code = ACCEL_ERR_NOT_FOUND; break;
    case EACCES: case EPERM: case EROFS: code = ACCEL_ERR_PERMISSION_DENIED; break;
    case ENOSPC: case EDQUOT: case ENOMEM: case EFBIG: code = ACCEL_ERR_RESOURCE_EXHAUSTED; break;
    case EEXIST: case ENOTEMPTY: code = ACCEL_ERR_ALREADY_EXISTS; break;
    // The path itself is unusable as given (fuzz.files_config reached "File name too long").
    case ENAMETOOLONG: case ELOOP: case EISDIR: code = ACCEL_ERR_INVALID_ARGUMENT; break;
    default: break;
    }
    fail(code, what + " \"" + path + "\": " + std::strerror(err));
}

namespace {
constexpr uint64_t kWritebackChunk = uint64_t(64) << 20;
}

OutFile::OutFile(const std::string &path) : path_(path)
{
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_errno(errno, "cannot create", path);
}

OutFile::~OutFile()
{
    if (fd_ >= 0) ::close(fd_);
}

void OutFile::write(const void *data, size_t len)
{
    const char *p = static_cast<const char *>(data);
    while (len > 0) {
        // 1 MiB per call, as dd bs=1M (the benchmark baseline).
        ssize_t n = ::write(fd_, p, std::min<size_t>(len, size_t(1) << 20));
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(errno, "cannot write", path_);
        }
        p += n;
        len -= static_cast<size_t>(n);
        written_ += static_cast<uint64_t>(n);
        if (written_ - flushed_ >= kWritebackChunk) {
            // A hint: errors (e.g. a filesystem without it) are ignored; fsync in close() is the guarantee.
            ::sync_file_range(fd_, static_cast<off_t>(flushed_), static_cast<off_t>(written_ - flushed_),
                              SYNC_FILE_RANGE_WRITE);
            flushed_ = written_;
        }
    }
}

void OutFile::write_at(const void *data, uint64_t offset, size_t len) const
{
    const char *p = static_cast<const char *>(data);
    const uint64_t start = offset;
    while (len > 0) {
        ssize_t n = ::pwrite(fd_, p, len, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(errno, "cannot write", path_);
        }
        p += n;
        len -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
    // As in write(): a hint, errors ignored.
    ::sync_file_range(fd_, static_cast<off_t>(start), static_cast<off_t>(offset - start), SYNC_FILE_RANGE_WRITE);
}

void OutFile::close()
{
    if (fd_ < 0) return;
    int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0) {
        int e = errno;
        ::close(fd);
        fail_errno(e, "cannot fsync", path_);
    }
    if (::close(fd) != 0) fail_errno(errno, "cannot close", path_);
}

MappedFile::MappedFile(const std::string &path, Access access) : path_(path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_errno(errno, "cannot open", path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        fail_errno(e, "cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(ACCEL_ERR_INVALID_ARGUMENT, "\"" + path + "\" is not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
        // Copy-on-write: tensors made over the map may be written to without touching the file.
        void *p = access == Access::Sequential ? ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)
                                               : ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            fail_errno(e, "cannot map", path);
        }
        if (access == Access::Sequential) {
            ::madvise(p, size_, MADV_SEQUENTIAL);
            ::madvise(p, size_, MADV_WILLNEED);
        } else {
            ::madvise(p, size_, MADV_RANDOM);
        }
        data_ = static_cast<const uint8_t *>(p);
    }
    fd_ = fd;
}

MappedFile::~MappedFile()
{
    if (data_ != nullptr) ::munmap(const_cast<uint8_t *>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
}

void MappedFile::read_at(void *dst, size_t offset, size_t len) const
{
    char *p = static_cast<char *>(dst);
    while (len > 0) {
        ssize_t n = ::pread(fd_, p, len, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(errno, "cannot read", path_);
        }
        if (n == 0)
            fail(ACCEL_ERR_DATA_LOSS, "\"" + path_ + "\": the file became shorter while it was being loaded");
        p += n;
        offset += static_cast<size_t>(n);
        len -= static_cast<size_t>(n);
    }
}

void write_file_durably(const std::string &path, const void *data, size_t len)
{
    OutFile f(path);
    f.write(data, len);
    f.close();
}

std::string read_small_file(const std::string &path, size_t max_bytes)
{
    MappedFile m(path);
    if (m.size() > max_bytes)
        fail(ACCEL_ERR_DATA_LOSS, "\"" + path + "\": " + std::to_string(m.size()) + " bytes, more than the " +
                                      std::to_string(max_bytes) + " bytes allowed for this file");
    return std::string(reinterpret_cast<const char *>(m.data()), m.size());
}

void fsync_dir(const std::string &dir)
{
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail_errno(errno, "cannot open folder", dir);
    int rc = ::fsync(fd);
    int e = errno;
    ::close(fd);
    if (rc != 0 && e != EINVAL) fail_errno(e, "cannot fsync folder", dir);
}

bool exists(const std::string &path)
{
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
}

bool is_dir(const std::string &path)
{
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string &path)
{
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void make_dirs(const std::string &path)
{
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) fail_errno(ec.value(), "cannot create folder", path);
    if (!is_dir(path)) fail(ACCEL_ERR_ALREADY_EXISTS, "\"" + path + "\" exists and is not a folder");
}

void remove_all(const std::string &path)
{
    // POSIX, not std::filesystem::remove_all: pip's LibTorch 2.x exports a copy of the latter that takes the place
    // of libstdc++'s, and it crashed there (torch 2.11 with GCC 13, on the GPU machine).
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        fail_errno(errno, "cannot remove", path);
    }
    if (!S_ISDIR(st.st_mode)) {
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail_errno(errno, "cannot remove", path);
        return;
    }
    // Depth first, links not followed; a non-zero return (the errno) stops the walk and is nftw's result.
    int rc = ::nftw(
        path.c_str(),
        [](const char *p, const struct stat *, int type, struct FTW *) -> int {
            int r = type == FTW_DP ? ::rmdir(p) : ::unlink(p);
            return r != 0 && errno != ENOENT ? errno : 0;
        },
        16, FTW_DEPTH | FTW_PHYS);
    if (rc != 0) fail_errno(rc == -1 ? errno : rc, "cannot remove", path);
}

void remove_checkpoint_folder(const std::string &path)
{
    // Already gone (removed by hand, or by another node sharing the folder): nothing to do, as remove_all.
    if (!exists(path)) return;
    std::vector<std::function<void()>> jobs;
    for (const auto &name : list_dir(path)) {
        struct stat st {};
        const std::string p = join(path, name);
        if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue; // left to remove_all
        jobs.emplace_back([p] {
            if (::unlink(p.c_str()) != 0 && errno != ENOENT) fail_errno(errno, "cannot remove", p);
        });
    }
    run_jobs(jobs, io_threads());
    remove_all(path);
}

std::vector<std::string> list_dir(const std::string &dir)
{
    std::vector<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        out.push_back(it->path().filename().string());
    if (ec) fail_errno(ec.value(), "cannot list folder", dir);
    return out;
}

std::string join(const std::string &a, const std::string &b)
{
    if (a.empty()) return b;
    if (a.back() == '/') return a + b;
    return a + "/" + b;
}

std::string parent_of(const std::string &path)
{
    auto pos = path.find_last_of('/');
    if (pos == std::string::npos) return ".";
    if (pos == 0) return "/";
    return path.substr(0, pos);
}

std::string basename_of(const std::string &path)
{
    auto pos = path.find_last_of('/');
    return pos == std::string::npos ? path : path.substr(pos + 1);
}

std::string normalize_path(const std::string &path)
{
    std::string p = path;
    if (!p.empty() && p[0] == '~' && (p.size() == 1 || p[1] == '/')) {
        const char *home = std::getenv("HOME");
        if (home != nullptr) p = std::string(home) + p.substr(1);
    }
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
}

std::string temp_sibling(const std::string &target)
{
    return join(parent_of(target), "." + basename_of(target) + ".accel-tmp");
}

bool is_temp_name(const std::string &name)
{
    return !name.empty() && name[0] == '.' && name.size() > 10 &&
           name.compare(name.size() - 10, 10, ".accel-tmp") == 0;
}

namespace {

// Recreates `src` at `dst` with hard links (no bytes copied): folders are made, files linked, symbolic
// links re-created. Anything else (a socket, a device) is refused rather than dropped.
void link_tree(const std::string &src, const std::string &dst)
{
    struct stat st {};
    if (::lstat(src.c_str(), &st) != 0) fail_errno(errno, "cannot read", src);
    if (S_ISDIR(st.st_mode)) {
        if (::mkdir(dst.c_str(), st.st_mode & 07777) != 0) fail_errno(errno, "cannot create folder", dst);
        for (const auto &name : list_dir(src)) link_tree(join(src, name), join(dst, name));
    } else if (S_ISREG(st.st_mode)) {
        if (::link(src.c_str(), dst.c_str()) != 0)
            fail_errno(errno, "cannot keep (hard-link into the new checkpoint folder) the file", src);
    } else if (S_ISLNK(st.st_mode)) {
        std::string to(static_cast<size_t>(st.st_size) + 1, '\0');
        ssize_t n = ::readlink(src.c_str(), to.data(), to.size());
        if (n < 0) fail_errno(errno, "cannot read the link", src);
        to.resize(static_cast<size_t>(n));
        if (::symlink(to.c_str(), dst.c_str()) != 0) fail_errno(errno, "cannot re-create the link", dst);
    } else {
        fail(ACCEL_ERR_FAILED_PRECONDITION, "save_state: \"" + src +
                                                "\" is neither a file, a folder nor a link; accel will not "
                                                "replace a folder holding it (move it, or save elsewhere)");
    }
}

} // namespace

void publish_dir(const std::string &tmp, const std::string &target,
                 const std::function<bool(const std::string &name, bool folder)> &replaced)
{
    const std::string parent = parent_of(target);
    if (!exists(target)) {
        fsync_dir(tmp);
        if (::rename(tmp.c_str(), target.c_str()) != 0) fail_errno(errno, "cannot rename checkpoint folder to", target);
    } else {
        if (!is_dir(target)) fail(ACCEL_ERR_ALREADY_EXISTS, "\"" + target + "\" exists and is not a folder");
        // The user's entries come along (as links: until the exchange they are still whole in `target`).
        // Only plain files and folders (not links) can be a previous checkpoint's; `replaced` says which.
        // A user's entry under a name the new folder holds would be lost: refused, before anything is linked.
        std::vector<std::string> keep;
        for (const auto &name : list_dir(target)) {
            const std::string p = join(target, name);
            struct stat st {};
            const bool known = ::lstat(p.c_str(), &st) == 0, folder = known && S_ISDIR(st.st_mode);
            if (known && (S_ISREG(st.st_mode) || folder) && replaced(name, folder)) continue;
            struct stat ours {};
            if (::lstat(join(tmp, name).c_str(), &ours) == 0)
                fail(ACCEL_ERR_ALREADY_EXISTS, "\"" + p + "\" is not an earlier checkpoint's " +
                                                   (S_ISDIR(ours.st_mode) ? "folder" : "file") +
                                                   " (a link, or a folder or file of the user's) and this save "
                                                   "writes that name; move it away first");
            keep.push_back(name);
        }
        for (const auto &name : keep) link_tree(join(target, name), join(tmp, name));
        fsync_dir(tmp);
        // Swap the complete new folder with the old one in one step, then remove the old one.
        if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
            fail_errno(errno, "cannot swap checkpoint folder into place at", target);
        fsync_dir(parent);
        remove_checkpoint_folder(tmp); // now holds the previous content (the user's files live on as links)
    }
    fsync_dir(parent);
}

} // namespace accel
