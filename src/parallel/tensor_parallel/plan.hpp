// Tensor parallelism at prepare (parallelism_config.tp_size > 1): the model's own plan narrows its
// parameters and swaps its linears (GptModel::apply_tensor_parallel), and the returned wrapper is the one
// the Accelerator keeps for the model: DDP over the data-parallel ranks (dp_replicate) inside, gradient
// clipping over the tp group (each shard counted once, each replicated parameter once). Models without a
// plan: ACCEL_ERR_UNIMPLEMENTED naming the model type. summon_full_params: FAILED_PRECONDITION (the model computes
// with its slices); checkpoints gather the whole tensors (whole_state.hpp).
#pragma once

#include "parallel/wrapper.hpp"

#include <memory>

namespace accel {
class Model;
}

namespace accel::config {
struct DistributedDataParallelKwargs;
}

namespace accel::distributed {
class DeviceMesh;
}

namespace accel::parallel::tp {

std::shared_ptr<ParallelWrapper> prepare_tensor_parallel(Model &model, const distributed::DeviceMesh &mesh,
                                                         const config::DistributedDataParallelKwargs &ddp);

} // namespace accel::parallel::tp
