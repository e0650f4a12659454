/** @file
 * memory utilities (Accelerate's utils/memory.py): find_executable_batch_size, which runs a step with a batch
 * size and retries it with a smaller one while it runs out of memory. */
#ifndef ACCEL_MEMORY_H
#define ACCEL_MEMORY_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * The step accel_find_executable_batch_size() runs: do the work (build the data loaders with @p batch_size,
 * prepare, train...) and return ACCEL_OK, or a status. ACCEL_ERR_RESOURCE_EXHAUSTED (what every accel call
 * returns when LibTorch's CPU allocator, CUDA's caching allocator or operator new fails), or any status whose
 * message (set with accel_callback_set_error(), or left by the accel call that failed) reports a failed
 * allocation ("out of memory", "can't allocate memory", "CUDA out of memory", ...), means "too large": the
 * step is run again with a smaller batch size. Any other status ends the search.
 */
typedef accel_status_t (*accel_batch_size_step_fn_t)(void *user_data, int64_t batch_size);

/**
 * Accelerate's find_executable_batch_size: call @p step with @p starting_batch_size; while it fails for lack of
 * memory, return freed memory to the system (glibc's free pages; call accel_accelerator_free_memory() at the
 * top of the step, as Accelerate's guide does, to drop what the previous try prepared), reduce the batch size
 * (batch_size = floor(batch_size * reduce_batch_size_factor)) and call it again.
 *
 * @p options_json (NULL = defaults):
 * - "reduce_batch_size_factor" (number in (0, 1), default 0.5): 0.5 halves as Accelerate up to 1.8 does;
 *   0.9 is Accelerate 1.9+'s default (int(batch_size * 0.9)).
 * - "max_memory_bytes" (a number of bytes or a size text such as "2GB"; default none): a budget for the bytes
 *   LibTorch's CPU allocator hands out while the step runs (every thread counts; tensors that existed before
 *   the step, such as the model's weights, do not). An allocation beyond it fails as an out-of-memory error
 *   does, so a CPU machine finds the batch size that fits in a memory budget smaller than its RAM.
 *
 * @param starting_batch_size  The first batch size tried; >= 1.
 * @param options_json         See above; NULL for the defaults.
 * @param step                 The step. Must not be NULL. Runs on the calling thread, during this call.
 * @param user_data            Passed to @p step.
 * @param out                  Receives the batch size with which @p step returned ACCEL_OK. Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for a bad argument or option (named);
 *         ACCEL_ERR_RESOURCE_EXHAUSTED "no executable batch size found, reached zero" when the step ran out of
 *         memory down to batch size 1 (the message also gives the last failure);
 *         ACCEL_ERR_FAILED_PRECONDITION when called with "max_memory_bytes" from inside a step that has one;
 *         otherwise the step's own status, unchanged, its message prefixed with the batch size it ran with.
 * Ownership: borrows its arguments for the call. On failure *out is 0.
 * Threads: any thread; @p step runs on it. "max_memory_bytes" counts every thread's allocations while the step
 * runs, so at most one such search runs at a time in a process.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_find_executable_batch_size(int64_t starting_batch_size,
                                                                          const char *options_json,
                                                                          accel_batch_size_step_fn_t step,
                                                                          void *user_data,
                                                                          int64_t *out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_MEMORY_H */
