// Typed form of the accelerator's JSON config (Accelerator(...) arguments and plugins).
#pragma once

#include <accel/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

struct GradientAccumulationPlugin {
    int64_t num_steps = 1;
    bool adjust_scheduler = true;
    bool sync_with_dataloader = true;
    bool sync_each_batch = false;
};

struct DataLoaderConfiguration {
    bool split_batches = false;
    std::optional<bool> dispatch_batches;
    bool even_batches = true;
    bool use_seedable_sampler = false;
    std::optional<uint64_t> data_seed;
    bool non_blocking = false;
    bool use_stateful_dataloader = false;
};

struct AutocastKwargs {
    bool enabled = true;
    bool cache_enabled = true;
};

// Process topology read from the launcher's environment.
struct ProcessTopology {
    int32_t rank = 0;
    int32_t world_size = 1;
    int32_t local_rank = 0;
    int32_t local_world_size = 1;
};

struct AcceleratorConfig {
    bool device_placement = true;
    bool cpu = false;
    accel_mixed_precision_t mixed_precision = ACCEL_MIXED_PRECISION_NO;
    GradientAccumulationPlugin gradient_accumulation;
    DataLoaderConfiguration dataloader;
    std::vector<std::string> rng_types{"generator"};
    bool step_scheduler_with_optimizer = true;
    AutocastKwargs autocast;
    ProcessTopology topology;
    bool malloc_tuning = true; // ACCEL_MALLOC_TUNING (environment only: a process-wide setting)
};

// Parses `json` (NULL = defaults), applying ACCELERATE_* environment defaults. Throws accel::Error.
AcceleratorConfig parse_accelerator_config(const char *json);
// The effective configuration as JSON text (for accel_accelerator_get_config_json).
std::string to_json(const AcceleratorConfig &config);
const char *mixed_precision_name(accel_mixed_precision_t mp);

} // namespace accel::config
