// ShardedDataParallel: the one engine behind fsdp_plugin and deepspeed_plugin (ZeRO 0-3, FSDP
// NO_SHARD / SHARD_GRAD_OP / FULL_SHARD). The prepared model's trainable parameters are packed into one
// flat fp32 buffer per unit (a unit = a layer chosen by the wrap policy; the root unit takes the rest),
// padded to a multiple of the process count, and each parameter becomes a view of its unit's buffer.
// Rank r owns slice r of every buffer: the optimizer is rebuilt over these slices ("shards").
//   - shard_optimizer (ZeRO-1): gradients all-reduced as DDP does; each rank steps its shard, then the
//     buffers are all-gathered.
//   - shard_gradients (ZeRO-2): a unit's gradients are reduce-scattered as soon as backward has produced
//     all of them; a rank keeps only its gradient shard.
//   - shard_parameters (ZeRO-3, SHARD_GRAD_OP, FULL_SHARD): a unit's buffer exists only while it computes:
//     all-gathered before its forward (and, with reshard_after_forward, again before its backward), its
//     storage released after. At rest a rank holds only its shards.
// Gradient accumulation outside sync steps keeps the unsharded gradients locally (FSDP's no_sync).
// HYBRID_SHARD(_ZERO2): all of the above among a node's processes (a sub-group); gradient shards are then
// all-reduced between the nodes' processes of the same local rank.
#pragma once

#include "config/sharding_config.hpp"
#include "parallel/fsdp/shard_layout.hpp"
#include "parallel/wrapper.hpp"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace accel {
class Model;
}
namespace accel::distributed {
class Communicator;
class DeviceMesh;
struct MeshShape;
}

namespace accel::parallel {

using ShardedMemory = WrapperMemory;

// The mesh today's sharding configs imply on `world` processes: (dp_replicate, dp_shard) = (1, world), or
// (nodes, processes per node) for HYBRID_SHARD(_ZERO2).
distributed::MeshShape sharded_mesh_shape(const config::ShardingConfig &config, int32_t world);

class ShardedDataParallel final : public ParallelWrapper {
public:
    // Shards over the mesh's dp_shard_cp group, replicates over dp_replicate (HSDP; HYBRID_SHARD), averages
    // gradients over dp_cp. Collective over the data-parallel processes.
    ShardedDataParallel(Model &model, const distributed::DeviceMesh &mesh, const config::ShardingConfig &config);
    // Over `comm` laid out as the sharding config alone says (sharded_mesh_shape): for tests and callers
    // without an accelerator.
    ShardedDataParallel(Model &model, std::shared_ptr<distributed::Communicator> comm,
                        const config::ShardingConfig &config);
    ~ShardedDataParallel();
    ShardedDataParallel(const ShardedDataParallel &) = delete;
    ShardedDataParallel &operator=(const ShardedDataParallel &) = delete;

    // Whether the next backward reduces gradients (false inside no_sync).
    void set_require_sync(bool on) override;
    // After loss.backward(): reduces what the hooks have not (unused parameters) and frees buffers.
    void finish_backward() override;
    void abort_backward() override;
    // A pipeline stage's engine (pipeline parallelism x sharding): each backward until finish_backward is `passes`
    // passes over the units (the schedule's micro-batches), whose gradients are final after the last;
    // clip_grad_norm sums its part over `pp` (every stage's), leaving out `counted_elsewhere` (undefined: none;
    // the last stage's copy of the tied embedding, which the first stage counts).
    void set_pipeline(std::shared_ptr<distributed::Communicator> pp, int32_t passes, at::Tensor counted_elsewhere);
    // After backwards without sync (finish_backward done): reduces the gradients accumulated locally, as a
    // synchronised backward in which no new gradient arrives would, whatever set_require_sync says (collective
    // over the data-parallel processes).
    void reduce_accumulated();
    // Whether a reduction's rounding depends on where a parameter lies in its unit: a sum of more than two ranks'
    // values is added in an order that follows its piece's position (two are added alike either way).
    bool reduction_depends_on_layout() const;
    // After a synchronised backward: `param`'s reduced gradient, whole, on every rank of the shard group
    // (collective over it; each element comes from the one rank holding it, so bit for bit), and writing this
    // rank's piece of it from `whole` (no communication). INTERNAL when `param` is not the engine's or has none.
    at::Tensor reduced_gradient(const at::Tensor &param);
    void set_reduced_gradient(const at::Tensor &param, const at::Tensor &whole);
    // The tensors the optimizer steps (one shard per unit, gradients attached on sync steps), and how they
    // map onto the model's parameters (for state dicts in the unsharded layout).
    std::vector<at::Tensor> optimizer_params() const;
    ShardLayout layout() const;
    // SHARDED_STATE_DICT: this rank's pieces of the model's state dict (the trainable parameters cut as
    // the shards are, the rest whole on the first rank), and where every rank's lie. No communication.
    ShardedState sharded_state_dict(const Model &model) const;
    // Loads such a state dict, saved by any number of processes, by ranges: checks that `src` holds every
    // tensor of the model's state dict with its shape (INVALID_ARGUMENT naming it otherwise) and returns the
    // names it takes and what reads this rank's pieces straight into its shards (whole tensors where they
    // are not sharded). No communication.
    std::pair<ApplyState, std::vector<std::string>> load_sharded_state_dict(const Model &model, const ShardedSource &src);
    // A frozen parameter's (or a buffer's) values as checkpoints keep them: while it computes in a 16-bit
    // param_dtype, its own-dtype master.
    at::Tensor own_value(const at::Tensor &tensor) const;
    // Whether frozen parameters are sharded (under parameter sharding): their values exist whole only while gathered.
    bool shards_frozen() const;
    // After the optimizer stepped the shards: all-gather them into the full buffers (when those persist).
    void after_optimizer_step();
    // Drops every gradient (shards, reduced buffers, local gradients): optimizer.zero_grad(set_to_none).
    void zero_grad();
    // Tensor parallelism inside the engine (the model already narrowed by its plan): `split` are this rank's tp
    // slices, every other parameter is replicated over `tp`. clip_grad_norm then counts each slice once (their
    // part summed over tp) and each replicated parameter once.
    void set_tensor_parallel(std::shared_ptr<distributed::Communicator> tp, const std::vector<at::Tensor> &split);
    // Global gradient norm from the shards (all-reduced), clipping the gradients when `clip`.
    double clip_grad_norm(double max_norm, double norm_type, bool clip) override;
    void clip_grad_value(double clip_value) override;
    // summon_full_params: gather every unit (true) / write the full values back to the shards and free
    // them (false). Collective.
    void summon_full_params(bool on) override;
    bool summoned() const override;
    // The layers (indexed as the model's layer_types()) that activation checkpointing recomputes: those
    // the wrap policy made units, as Accelerate applies checkpointing with the wrap policy; every layer
    // under NO_WRAP.
    std::vector<bool> checkpointed_layers() const;
    // free_memory (collective): every parameter gets whole memory of its own again and the model's forward
    // hooks are removed, so the model is as it was before prepare; the engine does nothing afterwards.
    void release(Model &model) override;
    ShardedMemory memory() const override;
    const config::ShardingConfig &config() const;
    bool writes_sharded_state_dict() const override { return config().state_dict_type == "SHARDED_STATE_DICT"; }
    ShardedDataParallel *sharded() override { return this; }

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

} // namespace accel::parallel
