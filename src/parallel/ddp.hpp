// DistributedDataParallel: Accelerate's DDP wrapping for one prepared model. Parameters (and buffers)
// are broadcast from rank 0 when the model is prepared; during backward every parameter's
// grad-accumulator post hook marks it ready, and a bucket (bucket_cap_mb, filled in reverse parameter
// order, the first one capped at 1 MiB as PyTorch does) is all-reduced as soon as all its gradients
// are in, while backward goes on. finish_backward() waits for the buckets and writes the averaged
// gradients back. set_require_sync(false) is DDP's no_sync(): hooks do nothing, gradients accumulate
// locally and the next synchronised backward reduces the sum.
#pragma once

#include "config/accelerator_config.hpp"
#include "parallel/wrapper.hpp"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel {

class Join;

struct DdpStats {
    int64_t num_buckets = 0;
    int64_t bucket_bytes = 0;     // bytes of one synchronisation (all buckets, as sent)
    int64_t syncs = 0;            // synchronised backward passes
    double sync_seconds = 0.0;    // sum over syncs of first bucket launch -> last bucket completion
    double wait_seconds = 0.0;    // sum over syncs of the time finish_backward waited after backward
    double busy_seconds = 0.0;    // sum over syncs of the time at least one bucket was in flight
    std::vector<int64_t> bucket_sizes; // bytes per bucket, in launch order
};

class DistributedDataParallel final : public ParallelWrapper {
public:
    DistributedDataParallel(std::vector<std::pair<std::string, at::Tensor>> parameters,
                            std::vector<std::pair<std::string, at::Tensor>> buffers,
                            std::shared_ptr<distributed::Communicator> comm,
                            const config::DistributedDataParallelKwargs &kwargs);
    ~DistributedDataParallel();
    DistributedDataParallel(const DistributedDataParallel &) = delete;
    DistributedDataParallel &operator=(const DistributedDataParallel &) = delete;

    // Whether the next backward all-reduces (false inside no_sync).
    void set_require_sync(bool on) override;
    bool require_sync() const;
    // After loss.backward(): waits for every bucket and writes the averaged gradients.
    void finish_backward() override;
    // After a failed backward: waits for what was launched (ignoring errors) and forgets this backward.
    void abort_backward() override;
    // Broadcast buffers from rank 0 (broadcast_buffers, before a training forward).
    void broadcast_buffers();
    DdpStats stats() const;

    // join_uneven_inputs (parallel/join.hpp; null: leave it). While set, this rank announces its buffer
    // broadcast and bucket all-reduces to `join` first, and the all-reduces start after backward, not during it.
    void set_join(std::shared_ptr<Join> join, size_t index);
    // On a rank that ran out of batches: receive the buffer broadcast from `root` (when broadcast_buffers);
    // all-reduce zeros for every bucket, as a synchronised backward would; parameters and buffers from `root`.
    void broadcast_buffers_from(int32_t root);
    void shadow_gradients();
    void broadcast_state_from(int32_t root);

    // ParallelWrapper: every rank holds every parameter and the averaged gradients, so clipping and memory
    // are those of a whole model (parallel/whole_gradients.hpp); before a training forward, broadcast_buffers.
    void before_forward() override { broadcast_buffers(); }
    double clip_grad_norm(double max_norm, double norm_type, bool clip) override;
    void clip_grad_value(double clip_value) override;
    WrapperMemory memory() const override;
    // Nothing to undo: the hooks do nothing once this object is gone.
    void release(Model &) override {}
    DistributedDataParallel *ddp() override { return this; }

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

} // namespace accel::parallel
