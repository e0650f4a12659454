// An AcceleratedOptimizer's state as Python's Optimizer.state_dict(): {"state": {index: {...}},
// "param_groups": [{hyperparameters..., "params": [indices]}]}, in PyTorch 1.13's key names.
#pragma once

#include "checkpointing/mapped_tensor.hpp"
#include "checkpointing/pickle.hpp"

#include <string>

namespace accel {
class AcceleratedOptimizer;
}

namespace accel::ckpt {

PyRef optimizer_state_dict(const AcceleratedOptimizer &optimizer);
// Restores state and hyperparameters; everything is checked before anything changes. `what` names the
// file in messages (DATA_LOSS for malformed content, INVALID_ARGUMENT when it does not fit this optimizer).
// With `batch`, the state tensors are in place when it returns but their values are copied in only by
// batch->run(), which the caller must call before the optimizer is used.
void load_optimizer_state_dict(AcceleratedOptimizer &optimizer, const PyObj &state_dict, const std::string &what,
                               CopyBatch *batch = nullptr);

} // namespace accel::ckpt
