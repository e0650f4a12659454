// Optimizer offload (DeepSpeed's offload_optimizer, ZeRO-Offload / ZeRO-Infinity) for sharded optimizers,
// whose parameters are the engine's flat shards, one per unit of the model, or pieces of them (several
// parameter groups, DeepSpeed's sub_group_size: accelerated_optimizer.hpp); "shard" below is such a parameter.
//
// "nvme": between steps every shard's state tensors live in files (offload_files.hpp), not in memory. A step
// runs the LibTorch step once per shard, with only that shard's gradient visible (the others' are set aside:
// LibTorch's optimizers skip parameters without a gradient, and the update of one parameter never depends on
// another's, so the result is bit for bit the same as one step over all). Around it, the next shard's state
// is read and the previous one's written on worker threads, so at most three shards' state is in memory:
// the one stepping, the one being read, the one being written.
// "cpu": the state already lives in host memory in this CPU build, and the step runs there; nothing moves,
// the state is accounted as offloaded.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accel {

class AcceleratedOptimizer;
class OffloadFiles;

// Parameter offload's paging (ShardLayout::page): starts bringing shard i in (true) or out (false) on a
// worker thread and returns the function that waits for it.
using PageFn = std::function<std::function<void()>(size_t, bool)>;

// Steps `params` one at a time, with only the gradient of the one stepping visible (`inner`: the LibTorch
// optimizer's step over all of them; it skips parameters without a gradient, and one parameter's update never
// depends on another's, so the result is bit for bit that of one step). Parameter i is paged in before its
// step and out after, the next one's read and the last one's write overlapping the step (at most three
// in memory). Every gradient is put back however this ends.
void step_each_shard(const std::vector<at::Tensor> &params, const std::function<void()> &inner, const PageFn &page);

class OptimizerOffload {
public:
    // `files`: for "nvme" (null for "cpu").
    OptimizerOffload(AcceleratedOptimizer &owner, const std::string &device, std::unique_ptr<OffloadFiles> files);
    ~OptimizerOffload();
    OptimizerOffload(const OptimizerOffload &) = delete;
    OptimizerOffload &operator=(const OptimizerOffload &) = delete;

    // One optimizer step; `inner` runs the LibTorch optimizer's step. `page_param` (parameter offload, may be
    // null): brings shard i's parameter into memory before its step and writes it out after, overlapped as
    // the state's reads and writes are.
    void step(const std::function<void()> &inner, const PageFn &page_param);
    // Every shard's state in memory (to read or replace it: state dicts, loading, unsharding), and back out.
    // `changed`: the state was replaced while in memory (written back), else it is dropped (the files hold it).
    void page_in_all();
    void page_out_all(bool changed);

    const std::string &device() const { return device_; }
    // Bytes of state kept outside process memory ("nvme": in the files; "cpu": all of it).
    int64_t offloaded_bytes() const;
    // The most state bytes that were in memory at once (nvme), since construction.
    int64_t peak_resident_bytes() const { return peak_; }

private:
    struct Slot {
        bool out = false;                // the state is in the file, not in memory
        bool saved = false;              // the file holds the state as it is now
        std::vector<at::Tensor> layout;  // empty tensors of each state tensor's dtype (undefined: none)
        std::vector<int64_t> numels;
        int64_t bytes = 0;
    };
    std::vector<at::Tensor> read(size_t i) const;   // the state of shard i from its file (worker thread)
    void install(size_t i, const std::vector<at::Tensor> &tensors);
    std::vector<at::Tensor> take(size_t i);         // records the layout, leaves empty tensors in the state
    void note_peak(int64_t in_flight); // the state in memory now, plus `in_flight` bytes held by workers

    AcceleratedOptimizer &owner_;
    std::string device_;
    std::unique_ptr<OffloadFiles> files_; // "nvme" only
    std::vector<Slot> slots_;             // by shard (the optimizer's parameter order)
    int64_t peak_ = 0;
};

} // namespace accel
