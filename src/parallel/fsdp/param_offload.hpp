// Parameter offload (DeepSpeed's offload_param, ZeRO-Infinity; FSDP's cpu_offload) for the sharding engine.
//
// "nvme" (ZeRO-3): between uses, each unit's float32 parameter shard lives in a file (common/offload_files)
// and its tensor has no storage (the optimizer keeps the same tensor object). The engine's all-gathers read
// the shard from the file into a transient buffer (on the collective queue's thread when prefetched, so the
// read overlaps compute); the optimizer step reads the next shard and writes the last one on worker threads
// while one steps (at most three in memory); loading a checkpoint brings them all in and writes them back.
// "cpu": the shards already live in host memory in this CPU build; nothing moves, they are accounted as
// offloaded.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accel {
class OffloadFiles;
}

namespace accel::parallel {

class ParamOffload {
public:
    // "nvme" creates this process's folder under `nvme_path` (errors name `path_key`).
    ParamOffload(const std::string &device, const std::string &nvme_path, const std::string &path_key, int32_t rank,
                 size_t num_units);
    ~ParamOffload();
    ParamOffload(const ParamOffload &) = delete;
    ParamOffload &operator=(const ParamOffload &) = delete;

    bool to_files() const { return files_ != nullptr; }
    // Shard `unit` is in its file, not in memory.
    bool out(size_t unit) const { return !in_memory_.empty() && !in_memory_[unit]; }

    // Writes the shard to its file and frees its storage (nvme; else nothing). A failed write
    // (RESOURCE_EXHAUSTED for a full disk, naming the file) leaves the shard in memory.
    void page_out(size_t unit, const at::Tensor &shard) { start_page_out(unit, shard)(); }
    // Gives the shard storage again and reads it back (nvme, when out).
    void page_in(size_t unit, const at::Tensor &shard) { start_page_in(unit, shard)(); }
    // The same with the file's I/O on a worker thread: the returned function waits for it (rethrowing its
    // error, with the shard left as the synchronous form leaves it) and must be called, on this thread,
    // before anything else touches the shard or this object. Meanwhile the shard counts as in memory.
    std::function<void()> start_page_out(size_t unit, const at::Tensor &shard);
    std::function<void()> start_page_in(size_t unit, const at::Tensor &shard);
    // The shard's values: the shard itself, or (when out) a new tensor read from its file.
    at::Tensor values(size_t unit, const at::Tensor &shard) const;
    // Sets the shard's values: into the shard, or (when out) into its file.
    void store(size_t unit, const at::Tensor &shard, const at::Tensor &values);

private:
    std::unique_ptr<OffloadFiles> files_; // "nvme" only
    std::vector<char> in_memory_;          // by unit ("nvme" only)
};

} // namespace accel::parallel
