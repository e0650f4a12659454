#include "common/offload_files.hpp"

#include "common/error.hpp"
#include "common/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace accel {

namespace {
// Closes on every path out.
struct Fd {
    int fd;
    ~Fd()
    {
        if (fd >= 0) ::close(fd);
    }
};
} // namespace

OffloadFiles::OffloadFiles(const std::string &nvme_path, const std::string &kind, int32_t rank, const std::string &what)
    : kind_(kind)
{
    const std::string base = normalize_path(nvme_path);
    try {
        if (exists(base) && !is_dir(base))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "\"" + base + "\" is not a folder");
        make_dirs(base);
        dir_ = join(base, "accel-" + kind + "-rank" + std::to_string(rank) + "-" + std::to_string(::getpid()));
        if (exists(dir_)) remove_all(dir_); // this pid's: left by an earlier run that had this pid and died
        make_dirs(dir_);
    } catch (const Error &e) {
        fail(e.code(), what + ": " + e.what());
    }
}

OffloadFiles::~OffloadFiles()
{
    try {
        remove_all(dir_);
    } catch (...) {
    }
}

std::string OffloadFiles::path_of(size_t index) const { return join(dir_, "state" + std::to_string(index) + ".bin"); }

void OffloadFiles::write(size_t index, const std::vector<std::pair<const void *, size_t>> &pieces) const
{
    const std::string path = path_of(index);
    Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
    if (f.fd < 0) fail_errno(errno, kind_ + " offload: cannot create", path);
    uint64_t at = 0;
    for (const auto &[data, len] : pieces)
        for (size_t done = 0; done < len;) {
            const ssize_t n = ::pwrite(f.fd, static_cast<const char *>(data) + done, len - done, static_cast<off_t>(at));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail_errno(n < 0 ? errno : ENOSPC, kind_ + " offload: cannot write", path);
            done += static_cast<size_t>(n);
            at += static_cast<uint64_t>(n);
        }
}

void OffloadFiles::read(size_t index, const std::vector<std::pair<void *, size_t>> &pieces) const
{
    const std::string path = path_of(index);
    Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) fail_errno(errno, kind_ + " offload: cannot open", path);
    uint64_t at = 0;
    for (const auto &[data, len] : pieces)
        for (size_t done = 0; done < len;) {
            const ssize_t n = ::pread(f.fd, static_cast<char *>(data) + done, len - done, static_cast<off_t>(at));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) fail_errno(errno, kind_ + " offload: cannot read", path);
            if (n == 0) fail(ACCEL_ERR_DATA_LOSS, kind_ + " offload: \"" + path + "\" is shorter than what was written to it");
            done += static_cast<size_t>(n);
            at += static_cast<uint64_t>(n);
        }
}

} // namespace accel
