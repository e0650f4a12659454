/* accel/accelerator.h - the Accelerator: preparation, the training loop, process facts. */
#ifndef ACCEL_ACCELERATOR_H
#define ACCEL_ACCELERATOR_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Create an accelerator from a JSON object whose keys are the arguments of Accelerate's
 * `Accelerator(...)`; NULL or "{}" means all defaults. Implemented keys: device_placement, cpu,
 * split_batches, mixed_precision ("no", "bf16"), gradient_accumulation_steps,
 * gradient_accumulation_plugin {num_steps, adjust_scheduler, sync_with_dataloader, sync_each_batch},
 * dataloader_config {split_batches, even_batches, use_seedable_sampler, data_seed, non_blocking, ...},
 * rng_types, step_scheduler_with_optimizer, kwargs_handlers {autocast: {enabled, cache_enabled}, ...}.
 * Other keys (deepspeed_plugin, fsdp_plugin, project_config, ...) are accepted while they hold their
 * default; any other value is ACCEL_ERR_UNIMPLEMENTED naming the key. Unknown keys, wrong types and
 * out-of-range values are ACCEL_ERR_INVALID_ARGUMENT naming the JSON path.
 * Precedence: JSON > ACCELERATE_* environment > default.
 * Ownership: free *out with accel_accelerator_free().
 * Threads: an accelerator and what it prepared may move between threads but must not be used from
 * two threads at once.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_create(const char *config_json,
                                                                  accel_accelerator_t **out) ACCEL_NOEXCEPT;

/** Frees the handle. NULL is fine. Objects it prepared stay usable: they keep its state alive. */
ACCEL_API void accel_accelerator_free(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/** The effective configuration (defaults and environment applied) as JSON. Free *out with accel_string_free(). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_config_json(const accel_accelerator_t *accelerator,
                                                                           char **out) ACCEL_NOEXCEPT;

/**
 * Prepare any of the four objects at once (each may be NULL), as `accelerator.prepare(...)`: models,
 * optimizers and data loaders first, then the scheduler. Handles are updated in place and bound to
 * this accelerator; preparing an object twice with the same accelerator is a no-op, with another one
 * ACCEL_ERR_FAILED_PRECONDITION. An optimizer must be created over a prepared (or the same) model.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare(accel_accelerator_t *accelerator,
                                                                   accel_model_t *model,
                                                                   accel_optimizer_t *optimizer,
                                                                   accel_dataloader_t *dataloader,
                                                                   accel_scheduler_t *scheduler) ACCEL_NOEXCEPT;
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_model(accel_accelerator_t *accelerator,
                                                                         accel_model_t *model) ACCEL_NOEXCEPT;
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_optimizer(accel_accelerator_t *accelerator,
                                                                             accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_dataloader(accel_accelerator_t *accelerator,
                                                                              accel_dataloader_t *dataloader) ACCEL_NOEXCEPT;
/** The scheduler's optimizer must have been prepared first (ACCEL_ERR_FAILED_PRECONDITION otherwise). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_scheduler(accel_accelerator_t *accelerator,
                                                                             accel_scheduler_t *scheduler) ACCEL_NOEXCEPT;

/**
 * A handle to the model without the accelerator's wrappers (autocast, fp32 output conversion): the same
 * parameters, usable with plain calls. Ownership: free *out with accel_model_free().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_unwrap_model(accel_accelerator_t *accelerator,
                                                                        const accel_model_t *model,
                                                                        accel_model_t **out) ACCEL_NOEXCEPT;

/**
 * Backpropagate @p loss (a scalar produced by a prepared model): divides it by
 * gradient_accumulation_steps, then runs backward, as `accelerator.backward(loss)`.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_backward(accel_accelerator_t *accelerator,
                                                                    accel_tensor_t *loss) ACCEL_NOEXCEPT;

/**
 * Enter `accelerator.accumulate(model)`: advances the micro-step counter and decides sync_gradients
 * (every gradient_accumulation_steps micro-steps, and always on the last batch of a prepared data
 * loader when sync_with_dataloader). Must be paired with accel_accelerator_accumulate_end(); nesting
 * is ACCEL_ERR_FAILED_PRECONDITION.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_accumulate_begin(accel_accelerator_t *accelerator,
                                                                            accel_model_t *model) ACCEL_NOEXCEPT;
/** Leave the accumulate() context. ACCEL_ERR_FAILED_PRECONDITION without a matching begin. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_accumulate_end(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/** Whether gradients are synchronised (and optimizers step) at this micro-step. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_sync_gradients(const accel_accelerator_t *accelerator,
                                                                              bool *out) ACCEL_NOEXCEPT;
/** The micro-step counter of accumulate() (Accelerate's `accelerator.step`). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_step(const accel_accelerator_t *accelerator,
                                                                    int64_t *out) ACCEL_NOEXCEPT;
/** gradient_accumulation_steps in force. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_gradient_accumulation_steps(
    const accel_accelerator_t *accelerator, int64_t *out) ACCEL_NOEXCEPT;
/** Whether the active prepared data loader is yielding its last batch. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_end_of_dataloader(const accel_accelerator_t *accelerator,
                                                                                 bool *out) ACCEL_NOEXCEPT;
/** The mixed-precision mode in force. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_mixed_precision(const accel_accelerator_t *accelerator,
                                                                               accel_mixed_precision_t *out) ACCEL_NOEXCEPT;
/** Whether any prepared optimizer skipped its last step. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_optimizer_step_was_skipped(
    const accel_accelerator_t *accelerator, bool *out) ACCEL_NOEXCEPT;

/**
 * Clip the gradients of @p model's parameters to a total norm of @p max_norm (norm_type 2, 1, ... or
 * INFINITY), as torch.nn.utils.clip_grad_norm_. Writes the total norm before clipping to @p out
 * (may be NULL).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_clip_grad_norm(accel_accelerator_t *accelerator,
                                                                          accel_model_t *model, double max_norm,
                                                                          double norm_type, double *out) ACCEL_NOEXCEPT;
/** Clamp every gradient of @p model into [-clip_value, clip_value]. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_clip_grad_value(accel_accelerator_t *accelerator,
                                                                           accel_model_t *model,
                                                                           double clip_value) ACCEL_NOEXCEPT;

/**
 * One training micro-step in one call, inside accumulate(model): forward on the batch's inputs, the
 * named loss (see accel_loss_compute) against its labels, backward, then optimizer step, scheduler
 * step (if @p scheduler is not NULL) and zero_grad, which act only on sync steps.
 * @param out_loss The undivided loss of this micro-batch; may be NULL.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_train_step(accel_accelerator_t *accelerator,
                                                                      accel_model_t *model,
                                                                      accel_optimizer_t *optimizer,
                                                                      accel_scheduler_t *scheduler,
                                                                      const accel_batch_t *batch,
                                                                      const char *loss_name,
                                                                      double *out_loss) ACCEL_NOEXCEPT;

/** Print @p text and a newline on the main process only (accelerator.print); flushes stdout. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_print(const accel_accelerator_t *accelerator,
                                                                 const char *text) ACCEL_NOEXCEPT;

/** Global rank of this process. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_process_index(const accel_accelerator_t *accelerator,
                                                                             int32_t *out) ACCEL_NOEXCEPT;
/** Rank of this process on its machine. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_local_process_index(
    const accel_accelerator_t *accelerator, int32_t *out) ACCEL_NOEXCEPT;
/** Number of processes in the job. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_num_processes(const accel_accelerator_t *accelerator,
                                                                             int32_t *out) ACCEL_NOEXCEPT;
/** Whether this is the main process (rank 0). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_is_main_process(const accel_accelerator_t *accelerator,
                                                                           bool *out) ACCEL_NOEXCEPT;
/** Whether this is the main process of its machine (local rank 0). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_is_local_main_process(
    const accel_accelerator_t *accelerator, bool *out) ACCEL_NOEXCEPT;

/** Rank of this process as the launcher's environment says (0 when not launched); no accelerator needed. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_get_index(int32_t *out) ACCEL_NOEXCEPT;
/** Number of processes as the launcher's environment says (1 when not launched). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_get_count(int32_t *out) ACCEL_NOEXCEPT;
/** Whether this process is rank 0. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_is_main(bool *out) ACCEL_NOEXCEPT;

/**
 * Seed LibTorch's default generator (and this library's), as accelerate.utils.set_seed.
 * @param device_specific Add the process index to the seed.
 * @param deterministic   Also ask LibTorch for deterministic algorithms.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_random_set_seed(uint64_t seed, bool device_specific,
                                                               bool deterministic) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_ACCELERATOR_H */
