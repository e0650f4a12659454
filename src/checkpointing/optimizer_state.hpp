// An AcceleratedOptimizer's state as Python's Optimizer.state_dict(): {"state": {index: {...}},
// "param_groups": [{hyperparameters..., "params": [indices]}]}, in PyTorch 1.13's key names.
#pragma once

#include "checkpointing/pickle.hpp"

#include <string>

namespace accel {
class AcceleratedOptimizer;
}

namespace accel::ckpt {

PyRef optimizer_state_dict(const AcceleratedOptimizer &optimizer);
// Restores state and hyperparameters; everything is checked before anything changes. `what` names the
// file in messages (DATA_LOSS for malformed content, INVALID_ARGUMENT when it does not fit this optimizer).
void load_optimizer_state_dict(AcceleratedOptimizer &optimizer, const PyObj &state_dict, const std::string &what);

} // namespace accel::ckpt
