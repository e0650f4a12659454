// Typed form of a learning-rate scheduler's JSON config.
#pragma once

#include <cstdint>
#include <string>

namespace accel::config {

struct SchedulerConfig {
    // constant, linear, cosine, step, exponential, polynomial; "dummy" (Accelerate's DummyScheduler: replaced at
    // prepare by hf_ds_config's scheduler block); DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR (built from
    // that block only: absolute learning rates, stepped once per optimizer step, from iteration -1)
    std::string type;
    int64_t num_warmup_steps = 0;   // DeepSpeed: warmup_num_steps
    int64_t num_training_steps = 0; // DeepSpeed: total_num_steps (DummyScheduler: -1 when not given)
    double num_cycles = 0.5;
    int64_t step_size = 1;
    double gamma = 0.1;
    double lr_end = 1e-7;
    double power = 1.0;
    // DeepSpeed's schedules: warmup_min_lr, warmup_max_lr, warmup_type log/linear, warmup_min_ratio, cos_min_ratio
    double warmup_min_lr = 0.0, warmup_max_lr = 1e-3;
    bool log_warmup = true;
    double warmup_min_ratio = 0.0, cos_min_ratio = 1e-4;
    bool deepspeed() const { return type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR"; }
};

SchedulerConfig parse_scheduler_config(const char *json);

} // namespace accel::config
