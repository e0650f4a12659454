// Tensor parallelism at prepare (parallelism_config.tp_size > 1): the model's own plan narrows its
// parameters and swaps its linears (GptModel::apply_tensor_parallel), and the returned wrapper is the one
// the Accelerator keeps for the model: DDP over the data-parallel ranks (dp_replicate) inside, gradient
// clipping over the tp group (each shard counted once, each replicated parameter once). Models without a
// plan: ACCEL_ERR_UNIMPLEMENTED naming the model type. summon_full_params: FAILED_PRECONDITION (the model computes
// with its slices); checkpoints gather the whole tensors (whole_state.hpp).
#pragma once

#include "parallel/wrapper.hpp"

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace accel {
class Model;
}

namespace accel::config {
struct DistributedDataParallelKwargs;
}

namespace accel::distributed {
class Communicator;
class DeviceMesh;
} // namespace accel::distributed

namespace accel::parallel::tp {

// The model's plan applied over the mesh's tp group (its parameters narrowed to this rank's slices, its linears
// swapped); returns the split parameters (the rest are replicated over tp). For callers that wrap the model
// themselves (the sharding engine: TP inside FSDP / ZeRO). `sequence_parallel` (tp_handler.sequence_parallel):
// Megatron's sequence parallelism too (the gpt model only; UNIMPLEMENTED naming the key for others).
std::vector<at::Tensor> apply_plan(Model &model, const distributed::DeviceMesh &mesh, bool sequence_parallel = false);

// This tp group's part of torch's clip_grad_norm_ (whole_gradients.hpp's grad_norm_part): the split
// parameters' part reduced over the tp group (each slice once), the replicated ones' (equal on every tp rank)
// added once; the same on every rank of the group. A pipeline stage reduces it further over its stages.
at::Tensor tensor_parallel_norm_part(const std::vector<at::Tensor> &split, const std::vector<at::Tensor> &replicated,
                                     distributed::Communicator &tp_group, double norm_type);

std::shared_ptr<ParallelWrapper> prepare_tensor_parallel(Model &model, const distributed::DeviceMesh &mesh,
                                                         const config::DistributedDataParallelKwargs &ddp,
                                                         bool sequence_parallel = false);

} // namespace accel::parallel::tp
