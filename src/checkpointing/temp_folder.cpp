#include "checkpointing/temp_folder.hpp"

#include "common/error.hpp"
#include "common/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace accel::ckpt {

namespace {

constexpr const char *kLockSuffix = ".lock";

std::string lock_path_of(const std::string &tmp) { return tmp + kLockSuffix; }

// The lock file's path still names the inode we locked: a holder removes the file before releasing it, so
// a lock taken on an unlinked (or replaced) file protects nothing and must be taken again.
bool still_named(int fd, const std::string &path)
{
    struct stat a {}, b {};
    return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string holder_of(int fd)
{
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s.empty() ? "unknown" : s;
}

} // namespace

TempFolderLock::TempFolderLock(const std::string &tmp) : path_(lock_path_of(tmp))
{
    for (int attempt = 0; attempt < 100; ++attempt) {
        const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) fail_errno(errno, "cannot create the lock file", path_);
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            const std::string pid = holder_of(fd);
            ::close(fd);
            if (err == EWOULDBLOCK)
                fail(ACCEL_ERR_ALREADY_EXISTS, "save_state: another process (pid " + pid + ") is writing \"" + tmp +
                                                   "\" (its lock: \"" + path_ + "\")");
            fail_errno(err, "cannot lock", path_);
        }
        if (!still_named(fd, path_)) { // a cleaner removed it between our open and our lock
            ::close(fd);
            continue;
        }
        const std::string pid = std::to_string(::getpid()) + "\n";
        if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
            const int err = errno;
            ::unlink(path_.c_str());
            ::close(fd);
            fail_errno(err, "cannot write", path_);
        }
        fd_ = fd;
        return;
    }
    fail(ACCEL_ERR_ABORTED, "save_state: could not take the lock \"" + path_ + "\" (it keeps being replaced)");
}

TempFolderLock::~TempFolderLock()
{
    // Unlink first, then release: whoever locks the old inode afterwards sees it is no longer named.
    ::unlink(path_.c_str());
    ::close(fd_);
}

size_t remove_stale_temp_folders(const std::string &dir)
{
    if (!is_dir(dir)) return 0;
    size_t removed = 0;
    const size_t suffix = std::strlen(kLockSuffix);
    for (const std::string &name : list_dir(dir)) {
        if (name.size() <= suffix || name.compare(name.size() - suffix, suffix, kLockSuffix) != 0) continue;
        const std::string tmp_name = name.substr(0, name.size() - suffix);
        if (!is_temp_name(tmp_name)) continue; // not a lock of ours
        const std::string lock = join(dir, name), tmp = join(dir, tmp_name);
        const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue; // gone meanwhile
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || !still_named(fd, lock)) {
            ::close(fd); // a live writer (or a lock file just replaced): not stale
            continue;
        }
        // Its writer is dead, and holding its lock keeps a new writer of the same name out while it goes.
        try {
            if (exists(tmp)) {
                remove_checkpoint_folder(tmp);
                ++removed;
            }
        } catch (...) {
            ::close(fd);
            throw;
        }
        ::unlink(lock.c_str());
        ::close(fd);
    }
    if (removed > 0) fsync_dir(dir);
    return removed;
}

} // namespace accel::ckpt
