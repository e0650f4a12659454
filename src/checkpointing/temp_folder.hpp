// Who may remove a checkpoint's temporary folder. A save writes ".NAME.accel-tmp" beside its final place and
// renames it into place when complete; a save killed midway (kill -9, a crash, a lost node) leaves it behind,
// up to a checkpoint's size. Its writer holds ".NAME.accel-tmp.lock" (its pid, flock-ed) for the whole save:
// the kernel drops the lock when the process dies, however it dies, so a temp folder whose lock file nobody
// holds is stale and can go. A folder without such a lock file was not made by this code and is left alone.
#pragma once

#include <cstddef>
#include <string>

namespace accel::ckpt {

// Held by the process writing `tmp` (a temp folder name, see temp_sibling()) from before the folder is
// created until it is published or removed. Another live holder: ACCEL_ERR_ALREADY_EXISTS naming its pid.
class TempFolderLock {
public:
    explicit TempFolderLock(const std::string &tmp);
    ~TempFolderLock(); // removes the lock file, then releases it
    TempFolderLock(const TempFolderLock &) = delete;
    TempFolderLock &operator=(const TempFolderLock &) = delete;

private:
    std::string path_;
    int fd_ = -1;
};

// Removes the stale temp folders in `dir`: every ".X.accel-tmp" whose ".X.accel-tmp.lock" no live process
// holds, and such lock files left without a folder. Returns how many folders it removed.
size_t remove_stale_temp_folders(const std::string &dir);

} // namespace accel::ckpt
