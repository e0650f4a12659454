// Options of find_executable_batch_size (accel/memory.h), parsed from its JSON argument.
#pragma once

#include <cstdint>
#include <optional>

namespace accel::config {

struct BatchSizeOptions {
    // batch_size = floor(batch_size * factor) after an out-of-memory failure: 0.5 as Accelerate up to 1.8,
    // 0.9 as Accelerate 1.9+ (int(batch_size * 0.9)).
    double reduce_batch_size_factor = 0.5;
    // A budget for the bytes LibTorch's CPU allocator hands out while the step runs; none when unset.
    std::optional<uint64_t> max_memory_bytes;
};

// NULL = defaults. `what` names the argument in messages ("options_json").
BatchSizeOptions parse_batch_size_options(const char *json, const char *what);

} // namespace accel::config
