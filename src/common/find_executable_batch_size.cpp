#include "common/find_executable_batch_size.hpp"

#include "common/allocator.hpp"
#include "common/error.hpp"
#include "common/memory_budget.hpp"
#include "common/out_of_memory.hpp"

#include <cmath>
#include <memory>
#include <new>
#include <sstream>

namespace accel {

bool should_reduce_batch_size(const std::exception &e)
{
    if (const auto *err = dynamic_cast<const Error *>(&e); err != nullptr && err->code() == ACCEL_ERR_RESOURCE_EXHAUSTED)
        return true;
    return dynamic_cast<const std::bad_alloc *>(&e) != nullptr || is_out_of_memory(e.what());
}

int64_t reduce_batch_size(int64_t batch_size, double factor)
{
    // floor, as Python's int(batch_size * 0.9) and batch_size //= 2 (exact for the factors and sizes in use).
    return static_cast<int64_t>(std::floor(static_cast<double>(batch_size) * factor));
}

int64_t find_executable_batch_size(int64_t starting_batch_size, const config::BatchSizeOptions &options,
                                   const std::function<void(int64_t)> &step)
{
    if (starting_batch_size < 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             "starting_batch_size: expected a batch size >= 1, got " + std::to_string(starting_batch_size));
    // Accelerate collects garbage and empties the device cache before the first try too.
    return_free_memory();
    int64_t batch_size = starting_batch_size;
    while (true) {
        std::string last;
        std::unique_ptr<MemoryBudgetScope> budget; // outside the try: its own refusal is no step failure
        if (options.max_memory_bytes) budget = std::make_unique<MemoryBudgetScope>(*options.max_memory_bytes);
        try {
            step(batch_size);
            return batch_size;
        } catch (const Error &e) {
            if (!should_reduce_batch_size(e))
                fail(e.code(), "the step failed with batch size " + std::to_string(batch_size) + ": " + e.what());
            last = e.what();
        } catch (const std::exception &e) {
            if (!should_reduce_batch_size(e)) throw;
            last = e.what();
        }
        // What the failed try left is gone with its stack; give the freed pages back before the next one.
        budget.reset();
        return_free_memory();
        const int64_t next = reduce_batch_size(batch_size, options.reduce_batch_size_factor);
        if (next == 0) {
            std::ostringstream factor;
            factor << options.reduce_batch_size_factor;
            fail(ACCEL_ERR_RESOURCE_EXHAUSTED,
                 "no executable batch size found, reached zero (started at " + std::to_string(starting_batch_size) +
                     ", reduce_batch_size_factor " + factor.str() +
                     "; batch size " + std::to_string(batch_size) + " ran out of memory: " + last + ")");
        }
        batch_size = next;
    }
}

} // namespace accel
