/** @file
 * learning-rate schedulers. */
#ifndef ACCEL_SCHEDULER_H
#define ACCEL_SCHEDULER_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Create a scheduler for @p optimizer from JSON. Shapes (multipliers of the initial lr, as in
 * transformers' get_*_schedule_with_warmup and torch.optim.lr_scheduler):
 *   {"type": "constant", "num_warmup_steps": 0}
 *   {"type": "linear", "num_warmup_steps": W, "num_training_steps": T}
 *   {"type": "cosine", "num_warmup_steps": W, "num_training_steps": T, "num_cycles": 0.5}
 *   {"type": "step", "step_size": S, "gamma": 0.1}
 *   {"type": "exponential", "gamma": G}
 *   {"type": "polynomial", "num_warmup_steps": W, "num_training_steps": T, "lr_end": 1e-7, "power": 1.0}
 *   {"type": "dummy", "total_num_steps": T, "warmup_num_steps": 0}: Accelerate's DummyScheduler, which
 *   prepare replaces with deepspeed_plugin.hf_ds_config's scheduler block (it cannot step before)
 * Creating it sets the lr for step 0, as PyTorch's schedulers do.
 * Ownership: borrows @p optimizer (kept alive); free *out with accel_scheduler_free().
 *
 * @param optimizer  The optimizer whose learning rate is scheduled (borrowed; kept alive). Must not be NULL.
 * @param config_json  JSON object as above (read during the call). Must not be NULL.
 * @param out  Receives a new scheduler handle, owned by the caller, who frees it with accel_scheduler_free(); NULL
 *             on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_scheduler_create(accel_optimizer_t *optimizer,
                                                                const char *config_json,
                                                                accel_scheduler_t **out) ACCEL_NOEXCEPT;

/**
 * Frees the handle. NULL is fine.
 *
 * @param scheduler  The handle to free, or NULL (then nothing happens).
 * Ownership: takes @p scheduler: it must not be used after the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_API void accel_scheduler_free(accel_scheduler_t *scheduler) ACCEL_NOEXCEPT;

/**
 * Advance the schedule. Once prepared, follows Accelerate's AcceleratedScheduler: nothing while
 * gradients accumulate, nothing when the optimizer step was skipped, and num_processes steps per call
 * unless split_batches (with step_scheduler_with_optimizer true, the default).
 *
 * @param scheduler  The scheduler (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_scheduler_step(accel_scheduler_t *scheduler) ACCEL_NOEXCEPT;

/**
 * The learning rate last set by the scheduler (first parameter group), as get_last_lr()[0].
 *
 * @param scheduler  The scheduler (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_scheduler_get_last_lr(const accel_scheduler_t *scheduler,
                                                                     double *out) ACCEL_NOEXCEPT;

/**
 * Number of schedule steps taken so far (PyTorch's last_epoch).
 *
 * @param scheduler  The scheduler (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_scheduler_get_step_count(const accel_scheduler_t *scheduler,
                                                                        int64_t *out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_SCHEDULER_H */
