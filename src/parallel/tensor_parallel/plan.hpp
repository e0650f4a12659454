// Tensor parallelism at prepare (parallelism_config.tp_size > 1): the model's own plan narrows its
// parameters and swaps its linears (GptModel::apply_tensor_parallel), and the returned wrapper is the one
// the Accelerator keeps for the model: DDP over the data-parallel ranks (dp_replicate) inside, gradient
// clipping over the tp group (each shard counted once, each replicated parameter once). Models without a
// plan: ACCEL_ERR_UNIMPLEMENTED naming the model type.
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

// save_state / load_state / save_model of a model split by tensor parallelism: ACCEL_ERR_UNIMPLEMENTED naming
// `what` (its tensors would have to be gathered over tp into whole ones; not built yet) instead of files of
// one rank's slices under whole tensors' names. Nothing for any other model.
void refuse_checkpoint_of_split_model(const Model &model, const char *what);

} // namespace accel::parallel::tp
