// ParallelWrapper: what the Accelerator asks of whatever wraps a prepared model for parallel training
// (DDP, the sharding engine behind fsdp_plugin / deepspeed_plugin; tensor, context and pipeline parallelism
// are to be further implementations). The Accelerator keeps one list of these and never branches on the
// kind: each implementation answers for itself (architecture.md, "The seams the next capabilities extend").
// Light on purpose: no LibTorch here, so the Accelerator's header does not pull it in.
#pragma once

#include <cstdint>
#include <string>

namespace accel {
class Model;
}

namespace accel::parallel {

class ShardedDataParallel;
class DistributedDataParallel;
namespace pp {
class PipelineParallel;
}

// Per-rank bytes of one wrapped model's state (accel_accelerator_get_memory_stats_json's fields).
struct WrapperMemory {
    int64_t parameter_bytes = 0;     // persistent parameter storage on this rank (shards, or full tensors)
    int64_t gradient_bytes = 0;      // gradient storage now allocated
    int64_t gathered_bytes = 0;      // full buffers of sharded units now allocated (transient)
    int64_t peak_gathered_bytes = 0; // the most gathered_bytes seen
    int64_t peak_model_state_bytes = 0;    // the most parameter + gradient + gathered bytes seen at a check point
    int64_t offloaded_parameter_bytes = 0; // offload_param: "nvme" shards in files, "cpu" all parameter bytes
    int64_t num_units = 0;
    int64_t padding_elements = 0;
    // Collectives of training since prepare (all-gathers of parameters, gradient reductions).
    int64_t all_gathers = 0, reductions = 0;
    int64_t ddp_bucket_bytes = 0; // DDP's flat copy of every gradient, kept apart from model state
};

// summon_full_params on a model whose parameters are always whole: FAILED_PRECONDITION saying so.
[[noreturn]] void refuse_summon_whole_model();

class ParallelWrapper {
public:
    virtual ~ParallelWrapper() = default;

    // Whether the next backward communicates gradients (false inside no_sync / accumulate()).
    virtual void set_require_sync(bool on) = 0;
    // Before a training forward (DDP: broadcast_buffers). Collective where it communicates.
    virtual void before_forward() {}
    // After loss.backward(): waits for / completes the gradient communication this backward started.
    virtual void finish_backward() = 0;
    // After a failed backward: waits for what was launched (ignoring errors) and forgets this backward.
    virtual void abort_backward() = 0;
    // Global gradient norm over every rank's part of the model (collective where gradients are split),
    // scaling the gradients to `max_norm` when `clip` (torch.nn.utils.clip_grad_norm_'s arithmetic).
    virtual double clip_grad_norm(double max_norm, double norm_type, bool clip) = 0;
    virtual void clip_grad_value(double clip_value) = 0;
    virtual WrapperMemory memory() const = 0;
    // summon_full_params (collective). This default: FAILED_PRECONDITION, the parameters are always whole.
    virtual void summon_full_params(bool on);
    virtual bool summoned() const { return false; }
    // Whether save_state writes this model and its optimizer as SHARDED_STATE_DICT folders (each rank its
    // pieces) instead of whole tensors.
    virtual bool writes_sharded_state_dict() const { return false; }
    // free_memory (collective where the model is split): the model is as it was before prepare.
    virtual void release(Model &model) = 0;

    // Typed access where a caller needs one engine's own interface (checkpoint layouts, DDP statistics).
    virtual ShardedDataParallel *sharded() { return nullptr; }
    virtual DistributedDataParallel *ddp() { return nullptr; }
    // A pipeline runs forward and backward itself (train_step hands it the batch).
    virtual pp::PipelineParallel *pipeline() { return nullptr; }
    const ShardedDataParallel *sharded() const { return const_cast<ParallelWrapper *>(this)->sharded(); }
    const DistributedDataParallel *ddp() const { return const_cast<ParallelWrapper *>(this)->ddp(); }
};

} // namespace accel::parallel
