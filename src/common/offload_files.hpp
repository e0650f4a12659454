// State kept in files (DeepSpeed's "nvme" offload devices, ZeRO-Infinity): one file per unit of the sharded
// model, in a folder of this process's own under the user's nvme_path, for one kind of state: "optimizer"
// (offload_optimizer: src/optimizer/optimizer_offload.cpp) or "param" (offload_param: the parameter shards,
// src/parallel/fsdp/param_offload.cpp). Raw bytes only (no LibTorch): the owner decides what they are.
// Files are written with pwrite and read with pread; neither is fsynced: they are swap space, not
// checkpoints, and are removed with the folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace accel {

class OffloadFiles {
public:
    // Creates "<nvme_path>/accel-<kind>-rank<rank>-<pid>" (and nvme_path itself if missing). Errors name
    // `what` (the config key) and the path: NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT (not a folder).
    // I/O errors name "<kind> offload" and the file.
    OffloadFiles(const std::string &nvme_path, const std::string &kind, int32_t rank, const std::string &what);
    ~OffloadFiles(); // removes the folder (only ever this object's)
    OffloadFiles(const OffloadFiles &) = delete;
    OffloadFiles &operator=(const OffloadFiles &) = delete;

    const std::string &dir() const { return dir_; }
    // Writes `pieces` one after the other as the whole content of slot `index`'s file. Thread-safe for
    // different slots. A full disk is RESOURCE_EXHAUSTED naming the file; the previous content is then gone.
    void write(size_t index, const std::vector<std::pair<const void *, size_t>> &pieces) const;
    // Reads slot `index`'s file into `pieces` (their sizes must add up to what was written: else DATA_LOSS).
    void read(size_t index, const std::vector<std::pair<void *, size_t>> &pieces) const;

private:
    std::string path_of(size_t index) const;
    std::string kind_, dir_;
};

} // namespace accel
