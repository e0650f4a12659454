// Learning-rate multipliers by step, as transformers' get_*_schedule_with_warmup and torch's StepLR /
// ExponentialLR closed forms. Pure functions: unit-tested against hand-computed values.
#pragma once

#include "config/scheduler_config.hpp"

#include <cstdint>

namespace accel {

// lr(step) = base_lr * lr_multiplier(config, step, base_lr); base_lr is needed by "polynomial" only.
double lr_multiplier(const config::SchedulerConfig &config, int64_t step, double base_lr);

} // namespace accel
