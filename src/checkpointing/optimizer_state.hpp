// An AcceleratedOptimizer's state as Python's Optimizer.state_dict(): {"state": {index: {...}},
// "param_groups": [{hyperparameters..., "params": [indices]}]}, in PyTorch 1.13's key names.
#pragma once

#include "checkpointing/mapped_tensor.hpp"
#include "checkpointing/pickle.hpp"

#include <functional>
#include <string>

namespace accel {
class AcceleratedOptimizer;
}

namespace accel::ckpt {

PyRef optimizer_state_dict(const AcceleratedOptimizer &optimizer);
// Checks a saved optimizer state dict against `optimizer` and schedules the copies of its state tensors
// into `batch` (into the optimizer's own state tensors where they fit); nothing of the optimizer changes
// yet. `what` names the file in messages (DATA_LOSS for malformed content, INVALID_ARGUMENT when it does
// not fit this optimizer). After batch.run(), the returned function installs the state and the
// hyperparameters.
std::function<void()> load_optimizer_state_dict(AcceleratedOptimizer &optimizer, const PyObj &state_dict,
                                                const std::string &what, CopyBatch &batch);

} // namespace accel::ckpt
