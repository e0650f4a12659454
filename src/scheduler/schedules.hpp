// Learning-rate multipliers by step, as transformers' get_*_schedule_with_warmup and torch's StepLR /
// ExponentialLR closed forms, and DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR (lr_schedules.py). Pure functions: unit-tested against hand-computed values.
#pragma once

#include "config/scheduler_config.hpp"

#include <cstdint>

namespace accel {

// lr(step) = base_lr * lr_multiplier(config, step, base_lr); base_lr is needed by "polynomial" only.
double lr_multiplier(const config::SchedulerConfig &config, int64_t step, double base_lr);

// The learning rate at `step` (DeepSpeed's schedules: at its last_batch_iteration, from -1), for a group whose
// optimizer lr was `base_lr` when the schedule began; "dummy" keeps it.
double scheduled_lr(const config::SchedulerConfig &config, int64_t step, double base_lr);

} // namespace accel
