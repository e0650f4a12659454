// Typed form of a learning-rate scheduler's JSON config.
#pragma once

#include <cstdint>
#include <string>

namespace accel::config {

struct SchedulerConfig {
    std::string type; // constant, linear, cosine, step, exponential, polynomial
    int64_t num_warmup_steps = 0;
    int64_t num_training_steps = 0;
    double num_cycles = 0.5;
    int64_t step_size = 1;
    double gamma = 0.1;
    double lr_end = 1e-7;
    double power = 1.0;
};

SchedulerConfig parse_scheduler_config(const char *json);

} // namespace accel::config
