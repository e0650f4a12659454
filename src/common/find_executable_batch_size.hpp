// Accelerate's find_executable_batch_size (utils/memory.py): run a step with a batch size and, while it runs out
// of memory, free memory and run it again with a smaller one. No LibTorch here (the budget's allocator is in
// memory_budget.cpp).
#pragma once

#include "config/batch_size_options.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace accel {

// Whether a step's failure means "too large": accel's RESOURCE_EXHAUSTED, or any error whose text reports a
// failed allocation (is_out_of_memory: LibTorch's CPU and CUDA allocators, std::bad_alloc), as Accelerate's
// should_reduce_batch_size reads the exception's text.
bool should_reduce_batch_size(const std::exception &e);

// The next batch size to try after `batch_size` ran out of memory: floor(batch_size * factor).
int64_t reduce_batch_size(int64_t batch_size, double factor);

// Calls step(batch_size) from `starting_batch_size` on, reducing after each out-of-memory failure, and returns
// the batch size of the first call that returned. Errors: RESOURCE_EXHAUSTED "no executable batch size found,
// reached zero" after a failure at batch size 1 (or wherever the factor rounds to 0); any other failure of the
// step propagates with its type and status, an accel::Error's message prefixed with the batch size.
// With options.max_memory_bytes, each call of the step runs under a MemoryBudgetScope.
int64_t find_executable_batch_size(int64_t starting_batch_size, const config::BatchSizeOptions &options,
                                   const std::function<void(int64_t)> &step);

} // namespace accel
