/** @file
 * the Accelerator: preparation, the training loop, process facts. */
#ifndef ACCEL_ACCELERATOR_H
#define ACCEL_ACCELERATOR_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Create an accelerator from a JSON object whose keys are the arguments of Accelerate's
 * `Accelerator(...)`; NULL or "{}" means all defaults. Implemented keys: device_placement, cpu,
 * split_batches, mixed_precision ("no", "bf16", "fp16", "fp8"), gradient_accumulation_steps,
 * gradient_accumulation_plugin {num_steps, adjust_scheduler, sync_with_dataloader, sync_each_batch},
 * dataloader_config {split_batches, even_batches, use_seedable_sampler, data_seed, non_blocking, ...},
 * rng_types, step_scheduler_with_optimizer, kwargs_handlers {autocast: {enabled, cache_enabled},
 * grad_scaler: {init_scale, growth_factor, backoff_factor, growth_interval, enabled}, fp8_recipe:
 * {fp8_format, margin, interval, amax_history_len, amax_compute_algo, override_linear_precision,
 * use_autocast_during_eval, backend}, ddp: {bucket_cap_mb, find_unused_parameters,
 * gradient_as_bucket_view, broadcast_buffers, comm_hook, ...}, init_process_group: {backend,
 * init_method, timeout}}. Started as several processes (accel launch, torchrun, mpirun, srun: RANK /
 * WORLD_SIZE or OMPI_COMM_WORLD_* in the environment) the first accelerator of the process joins the
 * others through the gloo or mpi backend (a collective: every rank must create one) and trains
 * data-parallel; a rendezvous that fails within init_process_group.timeout is ACCEL_ERR_UNAVAILABLE
 * or ACCEL_ERR_DEADLINE_EXCEEDED. "fp16" fails with ACCEL_ERR_UNIMPLEMENTED where LibTorch
 * has no fp16 kernels for the device (CPU LibTorch 1.13) unless kwargs_handlers.autocast.enabled is
 * false, which computes in fp32 with the dynamic loss scaler. "fp8" is emulated (docs/guides/mixed-precision.md).
 * Other keys (deepspeed_plugin, fsdp_plugin, project_config, ...) are accepted while they hold their
 * default; any other value is ACCEL_ERR_UNIMPLEMENTED naming the key. Unknown keys, wrong types and
 * out-of-range values are ACCEL_ERR_INVALID_ARGUMENT naming the JSON path.
 * Precedence: JSON > ACCELERATE_* environment > default.
 * Ownership: free *out with accel_accelerator_free().
 * Threads: an accelerator and what it prepared may move between threads but must not be used from
 * two threads at once.
 *
 * @param config_json  JSON object of Accelerator(...)'s arguments, read during the call; NULL or "{}" means all
 *                     defaults.
 * @param out  Receives a new accelerator handle, owned by the caller, who frees it with accel_accelerator_free();
 *             NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_create(const char *config_json,
                                                                  accel_accelerator_t **out) ACCEL_NOEXCEPT;

/**
 * Frees the handle. NULL is fine. Objects it prepared stay usable: they keep its state alive.
 *
 * @param accelerator  The handle to free, or NULL (then nothing happens).
 * Ownership: takes @p accelerator: it must not be used after the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_API void accel_accelerator_free(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/**
 * The effective configuration (defaults and environment applied) as JSON. Free *out with accel_string_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_config_json(const accel_accelerator_t *accelerator,
                                                                           char **out) ACCEL_NOEXCEPT;

/**
 * Accelerate's `accelerator.device`, as str(torch.device) prints it: "cuda:N" (N = LOCAL_RANK % GPUs) where
 * this LibTorch has CUDA, a GPU is visible and `cpu` is false; else "cpu". With device_placement (the
 * default) prepare moves models and the batches of prepared data loaders there. Free *out with
 * accel_string_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_device(const accel_accelerator_t *accelerator,
                                                                      char **out) ACCEL_NOEXCEPT;

/**
 * Prepare any of the four objects at once (each may be NULL), as `accelerator.prepare(...)`: models,
 * optimizers and data loaders first, then the scheduler. Handles are updated in place and bound to
 * this accelerator; preparing an object twice with the same accelerator is a no-op, with another one
 * ACCEL_ERR_FAILED_PRECONDITION. An optimizer must be created over a prepared (or the same) model.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  Model to prepare (borrowed; bound to this accelerator), or NULL.
 * @param optimizer  Optimizer to prepare (borrowed; bound to this accelerator), or NULL.
 * @param dataloader  Data loader to prepare (borrowed; bound to this accelerator), or NULL.
 * @param scheduler  Scheduler to prepare (borrowed; bound to this accelerator), or NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows the handles; each prepared object keeps the accelerator's state alive, so the handles may be
 * freed in any order.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare(accel_accelerator_t *accelerator,
                                                                   accel_model_t *model,
                                                                   accel_optimizer_t *optimizer,
                                                                   accel_dataloader_t *dataloader,
                                                                   accel_scheduler_t *scheduler) ACCEL_NOEXCEPT;
/**
 * Prepare one model, as accel_accelerator_prepare() with only @p model.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  Model to prepare (borrowed; bound to this accelerator). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows the handles; each prepared object keeps the accelerator's state alive, so the handles may be
 * freed in any order.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_model(accel_accelerator_t *accelerator,
                                                                         accel_model_t *model) ACCEL_NOEXCEPT;
/**
 * Prepare one optimizer, as accel_accelerator_prepare() with only @p optimizer.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param optimizer  Optimizer to prepare (borrowed; bound to this accelerator). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows the handles; each prepared object keeps the accelerator's state alive, so the handles may be
 * freed in any order.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_optimizer(accel_accelerator_t *accelerator,
                                                                             accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;
/**
 * Prepare one data loader, as accel_accelerator_prepare() with only @p dataloader.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param dataloader  Data loader to prepare (borrowed; bound to this accelerator). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows the handles; each prepared object keeps the accelerator's state alive, so the handles may be
 * freed in any order.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_dataloader(accel_accelerator_t *accelerator,
                                                                              accel_dataloader_t *dataloader) ACCEL_NOEXCEPT;
/**
 * The scheduler's optimizer must have been prepared first (ACCEL_ERR_FAILED_PRECONDITION otherwise).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param scheduler  Scheduler to prepare (borrowed; bound to this accelerator). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows the handles; each prepared object keeps the accelerator's state alive, so the handles may be
 * freed in any order.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_prepare_scheduler(accel_accelerator_t *accelerator,
                                                                             accel_scheduler_t *scheduler) ACCEL_NOEXCEPT;
/**
 * Accelerate's free_memory() / clear(): the accelerator forgets every object it prepared (models,
 * optimizers, schedulers, data loaders), which become unprepared objects again (a sharded model whole, with
 * its optimizer's state joined from every process; DDP's hooks removed; data loaders keep yielding this
 * process's batches), and step is reset to 0. Call it between two trainings with other objects; they may be
 * prepared again (by this or another accelerator). Collective when a model is sharded. Fails with
 * ACCEL_ERR_FAILED_PRECONDITION inside accumulate/autocast or while parameters are summoned.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_free_memory(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * The same as accel_accelerator_free_memory() (Accelerate's alias).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_clear(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/**
 * A handle to the model without the accelerator's wrappers (autocast, fp32 output conversion): the same
 * parameters, usable with plain calls. Ownership: free *out with accel_model_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  A model prepared by @p accelerator (borrowed). Must not be NULL.
 * @param out  Receives a new model handle, owned by the caller, who frees it with accel_model_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_unwrap_model(accel_accelerator_t *accelerator,
                                                                        const accel_model_t *model,
                                                                        accel_model_t **out) ACCEL_NOEXCEPT;

/**
 * Backpropagate @p loss (a scalar produced by a prepared model): divides it by
 * gradient_accumulation_steps, then runs backward, as `accelerator.backward(loss)`.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param loss  Scalar loss produced through a prepared model (borrowed). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_backward(accel_accelerator_t *accelerator,
                                                                    accel_tensor_t *loss) ACCEL_NOEXCEPT;

/**
 * LOMO's fused backward, as `accelerator.lomo_backward(loss, learning_rate)`: every prepared optimizer of type
 * "lomo" or "adalomo" updates each of its parameters while backward runs, as soon as that parameter's gradient
 * is complete, and the gradient is freed at once (no gradient of the whole model is ever held). With
 * clip_grad_norm in the optimizer's config, a first backward measures the gradients' norm (the two passes of
 * LOMO's grad_norm and fused_backward); clip_grad_value clamps each gradient. There is no optimizer step
 * afterwards (accel_optimizer_step fails for these types); a scheduler's learning rate is passed here.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param loss  Scalar loss produced through a prepared model (borrowed). Must not be NULL.
 * @param learning_rate  The learning rate of this update: finite and >= 0.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for a bad loss or learning_rate; ACCEL_ERR_FAILED_PRECONDITION
 *         when no lomo / adalomo optimizer is prepared, with gradient_accumulation_steps > 1, or when the loss's
 *         graph was already used; ACCEL_ERR_UNIMPLEMENTED under DDP, sharding (fsdp_plugin / deepspeed_plugin) or
 *         fp16's gradient scaler.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_lomo_backward(accel_accelerator_t *accelerator,
                                                                         accel_tensor_t *loss,
                                                                         double learning_rate) ACCEL_NOEXCEPT;

/**
 * Enter `accelerator.accumulate(model)`: advances the micro-step counter and decides sync_gradients
 * (every gradient_accumulation_steps micro-steps, and always on the last batch of a prepared data
 * loader when sync_with_dataloader). Must be paired with accel_accelerator_accumulate_end(); nesting
 * is ACCEL_ERR_FAILED_PRECONDITION. As Accelerate's accumulate(*models), only `model` skips gradient
 * communication (no_sync) on non-sync micro-steps; NULL names no model, so every prepared model keeps
 * all-reducing each micro-step (the optimizer still steps only when sync_gradients).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  The model whose gradient communication is skipped on non-sync micro-steps (borrowed), or NULL for
 *               none.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_accumulate_begin(accel_accelerator_t *accelerator,
                                                                            accel_model_t *model) ACCEL_NOEXCEPT;
/**
 * Leave the accumulate() context. ACCEL_ERR_FAILED_PRECONDITION without a matching begin.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_accumulate_end(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/**
 * Whether gradients are synchronised (and optimizers step) at this micro-step.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_sync_gradients(const accel_accelerator_t *accelerator,
                                                                              bool *out) ACCEL_NOEXCEPT;
/**
 * The micro-step counter of accumulate() (Accelerate's `accelerator.step`).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_step(const accel_accelerator_t *accelerator,
                                                                    int64_t *out) ACCEL_NOEXCEPT;
/**
 * gradient_accumulation_steps in force.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_gradient_accumulation_steps(
    const accel_accelerator_t *accelerator, int64_t *out) ACCEL_NOEXCEPT;
/**
 * Whether the active prepared data loader is yielding its last batch.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_end_of_dataloader(const accel_accelerator_t *accelerator,
                                                                                 bool *out) ACCEL_NOEXCEPT;
/**
 * The mixed-precision mode in force.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the mode (ACCEL_MIXED_PRECISION_NO on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_mixed_precision(const accel_accelerator_t *accelerator,
                                                                               accel_mixed_precision_t *out) ACCEL_NOEXCEPT;
/**
 * Whether any prepared optimizer skipped its last step: with mixed_precision "fp16" the gradient scaler
 * skips the step (and the scheduler's) when the gradients hold inf/NaN.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_optimizer_step_was_skipped(
    const accel_accelerator_t *accelerator, bool *out) ACCEL_NOEXCEPT;

/**
 * Whether this accelerator has a gradient scaler: true for mixed_precision "fp16" unless
 * kwargs_handlers.grad_scaler.enabled is false.
 * Ownership: borrows @p accelerator. Threads: same rules as the accelerator.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_has_grad_scaler(const accel_accelerator_t *accelerator,
                                                                           bool *out) ACCEL_NOEXCEPT;
/**
 * The gradient scaler's current loss scale (PyTorch's `scaler.get_scale()`): init_scale before the
 * first backward, then halved (backoff_factor) after every step with inf/NaN gradients and doubled
 * (growth_factor) after growth_interval clean steps. 1.0 when there is no scaler.
 * Ownership: borrows @p accelerator. Threads: same rules as the accelerator.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_grad_scale(const accel_accelerator_t *accelerator,
                                                                          double *out) ACCEL_NOEXCEPT;
/**
 * The gradient scaler's growth tracker: clean optimizer steps since the last change of scale (the
 * `_growth_tracker` entry of its state dict). 0 when there is no scaler.
 * Ownership: borrows @p accelerator. Threads: same rules as the accelerator.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_grad_scaler_growth_tracker(
    const accel_accelerator_t *accelerator, int64_t *out) ACCEL_NOEXCEPT;
/**
 * Divide the gradients of @p optimizer (NULL: every optimizer this accelerator prepared) by the loss
 * scale, as `accelerator.unscale_gradients()`, for code that inspects or changes gradients before
 * the step. Does nothing without a gradient scaler. accel_accelerator_clip_grad_norm/_value call it
 * themselves. Once per optimizer step: a second call before the step is ACCEL_ERR_FAILED_PRECONDITION,
 * as is a call before any accel_accelerator_backward.
 * Ownership: borrows both handles. Threads: same rules as the accelerator.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param optimizer  Optimizer whose gradients are unscaled (borrowed), or NULL for every optimizer this accelerator
 *                   prepared.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_unscale_gradients(accel_accelerator_t *accelerator,
                                                                             accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;

/**
 * Enter `accelerator.autocast()`: until the matching accel_accelerator_autocast_end(), operations run
 * on the calling thread (for instance accel_model_forward on an unwrapped model, accel_loss_compute)
 * use the accelerator's autocast: bf16 for "bf16" and "fp8", fp16 for "fp16" (off when
 * kwargs_handlers.autocast.enabled is false); nothing changes for "no". Pairs nest.
 * Autocast state belongs to the thread: call begin and end on the same thread, and end every begin
 * before freeing the accelerator.
 * Ownership: borrows @p accelerator.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_autocast_begin(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * Leave the innermost autocast scope. ACCEL_ERR_FAILED_PRECONDITION without a matching begin.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_autocast_end(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/**
 * Enter accelerator.profile() (Accelerate's profile context with kwargs_handlers.profile, ProfileKwargs):
 * LibTorch's profiler records this thread's operators and accel's phases (named ranges accel::forward,
 * accel::backward, accel::optimizer_step, accel::data_wait, accel::bucket_all_reduce, accel::gradient_sync,
 * accel::save_state, accel::load_state, accel::save_model) until accel_accelerator_profile_end().
 * With kwargs_handlers.profile.schedule_option, every accel_optimizer_step() of the first optimizer stepped
 * is one prof.step(): only the schedule's active steps are kept (warmup steps are profiled and dropped).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_FAILED_PRECONDITION when a profile is already running or
 *         kwargs_handlers.profile.output_trace_dir is not set; the folder's error when it cannot be created.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: the profiler records the calling thread; the optimizer steps and the end must come from it too.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_profile_begin(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * Leave accelerator.profile(): stops the profiler and writes this process's Chrome trace JSON (chrome://tracing,
 * Perfetto) to output_trace_dir/profile_{process_index}.json, then waits for every process (collective, as
 * Accelerate's wait_for_everyone after the export). The profile has ended when this returns, whatever the status,
 * except when called on another thread than the begin (it goes on, for an end on that thread).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_FAILED_PRECONDITION without a matching begin or on another thread; the file's
 *         error when the trace cannot be written.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: call it on the thread that called accel_accelerator_profile_begin().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_profile_end(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/**
 * Clip the gradients of @p model's parameters to a total norm of @p max_norm (norm_type 2, 1, ... or
 * INFINITY), as torch.nn.utils.clip_grad_norm_. Writes the total norm before clipping to @p out
 * (may be NULL). With a gradient scaler (fp16) the gradients of every prepared optimizer are unscaled
 * first (accel_accelerator_unscale_gradients), so the norm is that of the true gradients; call it once
 * per optimizer step, when sync_gradients is true.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  Model whose gradients are clipped (borrowed). Must not be NULL.
 * @param max_norm  Largest total norm allowed; must be finite and >= 0.
 * @param norm_type  Order of the norm: 2 (the usual), 1, any p > 0, or INFINITY for the largest absolute value.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_clip_grad_norm(accel_accelerator_t *accelerator,
                                                                          accel_model_t *model, double max_norm,
                                                                          double norm_type, double *out) ACCEL_NOEXCEPT;
/**
 * Clamp every gradient of @p model into [-clip_value, clip_value] (after unscaling, as clip_grad_norm).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  Model whose gradients are clamped (borrowed). Must not be NULL.
 * @param clip_value  Largest absolute value a gradient keeps; must be finite and >= 0.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_clip_grad_value(accel_accelerator_t *accelerator,
                                                                           accel_model_t *model,
                                                                           double clip_value) ACCEL_NOEXCEPT;

/**
 * One training micro-step in one call, inside accumulate(model): forward on the batch's inputs, the
 * named loss (see accel_loss_compute) against its labels, backward, then optimizer step, scheduler
 * step (if @p scheduler is not NULL) and zero_grad, which act only on sync steps.
 * @param out_loss The undivided loss of this micro-batch; may be NULL.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  A model prepared by @p accelerator (borrowed). Must not be NULL.
 * @param optimizer  An optimizer over @p model prepared by @p accelerator (borrowed). Must not be NULL.
 * @param scheduler  A scheduler prepared by @p accelerator (borrowed), or NULL for none.
 * @param batch  The batch: its inputs go through the model, its labels to the loss (borrowed). Must not be NULL.
 * @param loss_name  Loss name or JSON object, as accel_loss_compute() takes it. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_train_step(accel_accelerator_t *accelerator,
                                                                      accel_model_t *model,
                                                                      accel_optimizer_t *optimizer,
                                                                      accel_scheduler_t *scheduler,
                                                                      const accel_batch_t *batch,
                                                                      const char *loss_name,
                                                                      double *out_loss) ACCEL_NOEXCEPT;

/**
 * Print @p text and a newline on the main process only (accelerator.print); flushes stdout.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param text  NUL-terminated text (read during the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_print(const accel_accelerator_t *accelerator,
                                                                 const char *text) ACCEL_NOEXCEPT;

/**
 * Global rank of this process.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_process_index(const accel_accelerator_t *accelerator,
                                                                             int32_t *out) ACCEL_NOEXCEPT;
/**
 * Rank of this process on its machine.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_local_process_index(
    const accel_accelerator_t *accelerator, int32_t *out) ACCEL_NOEXCEPT;
/**
 * Number of processes in the job.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_num_processes(const accel_accelerator_t *accelerator,
                                                                             int32_t *out) ACCEL_NOEXCEPT;
/**
 * Whether this is the main process (rank 0).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_is_main_process(const accel_accelerator_t *accelerator,
                                                                           bool *out) ACCEL_NOEXCEPT;
/**
 * Whether this is the main process of its machine (local rank 0).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_is_local_main_process(
    const accel_accelerator_t *accelerator, bool *out) ACCEL_NOEXCEPT;

/**
 * Rank of this process as the launcher's environment says (0 when not launched); no accelerator needed.
 *
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_get_index(int32_t *out) ACCEL_NOEXCEPT;
/**
 * Number of processes as the launcher's environment says (1 when not launched).
 *
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_get_count(int32_t *out) ACCEL_NOEXCEPT;
/**
 * Whether this process is rank 0.
 *
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_is_main(bool *out) ACCEL_NOEXCEPT;

/**
 * Seed LibTorch's default generator (and this library's), as accelerate.utils.set_seed.
 * @param device_specific Add the process index to the seed.
 * @param deterministic   Also ask LibTorch for deterministic algorithms.
 *
 * @param seed  The seed.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: call it while no other thread trains: it seeds process-wide generators.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_random_set_seed(uint64_t seed, bool device_specific,
                                                               bool deterministic) ACCEL_NOEXCEPT;

/* ---- Distributed: collectives and process roles ------------------------------------------------
 * With several processes (started by `accel launch`, torchrun, mpirun or srun) the accelerator
 * communicates through its backend (gloo, mpi); with one process these functions return their input
 * (accel_accelerator_reduce: a copy) and barriers do nothing. Collectives must be called in the same
 * order on every rank. A peer that dies or stops answering makes them fail with
 * ACCEL_ERR_UNAVAILABLE or ACCEL_ERR_DEADLINE_EXCEEDED (kwargs_handlers.init_process_group.timeout)
 * naming the rank where the backend can tell; later collectives then fail with ACCEL_ERR_ABORTED.
 * Threads: same rules as the accelerator. */

/**
 * All-gather @p tensor from every process, concatenated along dimension 0 in rank order
 * (`accelerator.gather`). Every rank must pass the same shape (pad first with
 * accel_accelerator_pad_across_processes); a mismatch is ACCEL_ERR_INVALID_ARGUMENT naming the ranks.
 * A 0-d tensor is gathered as shape [1].
 * Ownership: borrows @p tensor; free *out with accel_tensor_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param tensor  This process's tensor (borrowed). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_gather(accel_accelerator_t *accelerator,
                                                                  const accel_tensor_t *tensor,
                                                                  accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * accel_accelerator_gather(), then, while the last batch of a prepared data loader is being processed,
 * only the first `remainder` rows are kept, so that the samples repeated to even out the last batch
 * are dropped and a pass over the loader gathers exactly the data set's length
 * (`accelerator.gather_for_metrics`). Ownership: borrows @p tensor; free *out with accel_tensor_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param tensor  This process's tensor (borrowed). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_gather_for_metrics(accel_accelerator_t *accelerator,
                                                                              const accel_tensor_t *tensor,
                                                                              accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * Reduce @p tensor over all processes (`accelerator.reduce`): @p reduction is "sum", "mean", "max",
 * "min" or "none" (which sums, as Accelerate). Every rank gets the result; the input is unchanged.
 * Ownership: borrows @p tensor and @p reduction; free *out with accel_tensor_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param tensor  This process's tensor (borrowed; unchanged). Must not be NULL.
 * @param reduction  "sum", "mean", "max", "min" or "none"; any other name is ACCEL_ERR_INVALID_ARGUMENT.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_reduce(accel_accelerator_t *accelerator,
                                                                  const accel_tensor_t *tensor,
                                                                  const char *reduction,
                                                                  accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * Overwrite @p tensor, in place, with the one of process @p from_process on every process
 * (`broadcast`). Shapes and dtypes must match across processes. ACCEL_ERR_OUT_OF_RANGE if
 * @p from_process is not a rank. Ownership: borrows @p tensor (modified in place).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param tensor  The tensor to overwrite in place (borrowed). Must not be NULL.
 * @param from_process  Rank whose values every process receives, 0 ... num_processes - 1.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_broadcast(accel_accelerator_t *accelerator,
                                                                     accel_tensor_t *tensor,
                                                                     int32_t from_process) ACCEL_NOEXCEPT;
/**
 * Pad @p tensor along @p dim (negative counts from the end) to the largest size any process has,
 * filling with @p pad_index, the data at the start (or at the end when @p pad_first)
 * (`accelerator.pad_across_processes`). A @p dim out of range returns the tensor unchanged.
 * Ownership: borrows @p tensor; free *out with accel_tensor_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param tensor  This process's tensor (borrowed). Must not be NULL.
 * @param dim  Dimension to pad; negative counts from the end.
 * @param pad_index  Value written into the padding.
 * @param pad_first  Pad before the data instead of after it.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_pad_across_processes(accel_accelerator_t *accelerator,
                                                                                const accel_tensor_t *tensor,
                                                                                int64_t dim, double pad_index,
                                                                                bool pad_first,
                                                                                accel_tensor_t **out) ACCEL_NOEXCEPT;
/**
 * This process's share of @p tensor's rows (`split_between_processes`): with n rows and P processes
 * the first n % P ranks get n / P + 1 contiguous rows, the others n / P. With @p apply_padding every
 * share is padded to n / P + 1 rows (when n % P != 0) by repeating the global last row. Needs no
 * communication. Ownership: borrows @p tensor; free *out with accel_tensor_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param tensor  The whole tensor, the same on every process (borrowed). Must not be NULL.
 * @param apply_padding  Pad every share to the same number of rows by repeating the last row.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_split_between_processes(accel_accelerator_t *accelerator,
                                                                                   const accel_tensor_t *tensor,
                                                                                   bool apply_padding,
                                                                                   accel_tensor_t **out) ACCEL_NOEXCEPT;
/* ---- Object collectives (`gather_object`, `broadcast_object_list`, `broadcast_object`) ----------------
 * Python objects become bytes here: each process passes byte strings (a serialization of its choice) or JSON
 * text. Sizes travel first, so the objects may differ in length from process to process; an empty object (0
 * bytes) is fine. A process whose input is invalid (NULL data with a size, malformed JSON) makes the call fail
 * on every process with ACCEL_ERR_INVALID_ARGUMENT naming that process, instead of leaving its peers waiting.
 * With one process these return the input. Results arrive as an accel_object_list_t (one byte string per
 * entry) or as JSON text. Collectives: call them on every process, in the same order. */

/**
 * `gather_object`: every process's byte string, in rank order (entry r is process r's). Accelerate's
 * gather_object takes a list per process and concatenates them; with bytes, each process contributes one
 * entry (accel_accelerator_gather_object_json concatenates JSON arrays as Accelerate does).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param data  This process's bytes (borrowed; copied). May be NULL only when @p size is 0.
 * @param size  Number of bytes at @p data; 0 for an empty object.
 * @param out  Receives a new list of num_processes entries, owned by the caller, who frees it with
 *             accel_object_list_free(); NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows @p data for the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_gather_object(accel_accelerator_t *accelerator,
                                                                         const uint8_t *data, size_t size,
                                                                         accel_object_list_t **out) ACCEL_NOEXCEPT;
/**
 * `broadcast_object_list`: process @p from_process's list of byte strings on every process. The other
 * processes' lists are ignored (pass NULL and 0), so the result always has the sender's length.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param items  On @p from_process: @p count pointers to the entries (an entry may be NULL when its size is 0).
 *               Ignored elsewhere.
 * @param sizes  On @p from_process: @p count byte counts. Ignored elsewhere.
 * @param count  On @p from_process: number of entries (0: an empty list). Ignored elsewhere.
 * @param from_process  Rank whose list every process receives, 0 ... num_processes - 1 (ACCEL_ERR_OUT_OF_RANGE
 *                      otherwise; every process must pass the same).
 * @param out  Receives a new list, owned by the caller, who frees it with accel_object_list_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows @p items and @p sizes for the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_broadcast_object_list(accel_accelerator_t *accelerator,
                                                                                 const uint8_t *const *items,
                                                                                 const size_t *sizes, size_t count,
                                                                                 int32_t from_process,
                                                                                 accel_object_list_t **out) ACCEL_NOEXCEPT;
/**
 * `broadcast_object`: process @p from_process's byte string on every process, as a list of one entry. The
 * other processes' @p data is ignored (pass NULL and 0).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param data  On @p from_process: the bytes (may be NULL when @p size is 0). Ignored elsewhere.
 * @param size  On @p from_process: number of bytes at @p data. Ignored elsewhere.
 * @param from_process  Rank whose bytes every process receives, 0 ... num_processes - 1.
 * @param out  Receives a new list of one entry, owned by the caller, who frees it with accel_object_list_free();
 *             NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows @p data for the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_broadcast_object(accel_accelerator_t *accelerator,
                                                                            const uint8_t *data, size_t size,
                                                                            int32_t from_process,
                                                                            accel_object_list_t **out) ACCEL_NOEXCEPT;
/**
 * `gather_object` over JSON: each process passes a JSON array (Accelerate's gather_object takes a list per
 * process); *out is one JSON array holding every process's elements, rank 0's first (each process's text kept
 * as written). A value that is not an array is ACCEL_ERR_INVALID_ARGUMENT (wrap a single value as [value]).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param json  This process's JSON array, NUL-terminated UTF-8 (borrowed). Must not be NULL.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows @p json for the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_gather_object_json(accel_accelerator_t *accelerator,
                                                                              const char *json,
                                                                              char **out) ACCEL_NOEXCEPT;
/**
 * `broadcast_object` / `broadcast_object_list` over JSON: process @p from_process's JSON value (any value; a
 * list is an array) as text on every process. The other processes' @p json is ignored (may be NULL).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param json  On @p from_process: a JSON value, NUL-terminated UTF-8 (must not be NULL there). Ignored elsewhere.
 * @param from_process  Rank whose value every process receives, 0 ... num_processes - 1.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows @p json for the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_broadcast_object_json(accel_accelerator_t *accelerator,
                                                                                 const char *json,
                                                                                 int32_t from_process,
                                                                                 char **out) ACCEL_NOEXCEPT;
/**
 * Number of entries of an object list.
 *
 * @param list  The list (borrowed). Must not be NULL.
 * @param out  Receives the count (0 on failure). Must not be NULL.
 * @return ACCEL_OK, or ACCEL_ERR_INVALID_ARGUMENT naming the NULL argument.
 * Ownership: borrows @p list.
 * Threads: a list may be read from several threads at once; it must not be freed meanwhile.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_object_list_get_count(const accel_object_list_t *list,
                                                                     size_t *out) ACCEL_NOEXCEPT;
/**
 * Entry @p index of an object list: a pointer to its bytes and their number. The bytes belong to the list and
 * stay valid until accel_object_list_free(); copy them to keep them longer. An empty entry has size 0 and a
 * non-NULL pointer.
 *
 * @param list  The list (borrowed). Must not be NULL.
 * @param index  0 ... count - 1 (ACCEL_ERR_OUT_OF_RANGE otherwise).
 * @param out_data  Receives the borrowed pointer (NULL on failure). Must not be NULL.
 * @param out_size  Receives the number of bytes (0 on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: *out_data is borrowed from @p list.
 * Threads: a list may be read from several threads at once; it must not be freed meanwhile.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_object_list_get_item(const accel_object_list_t *list, size_t index,
                                                                    const uint8_t **out_data,
                                                                    size_t *out_size) ACCEL_NOEXCEPT;
/**
 * Free an object list and every entry's bytes. NULL is fine.
 *
 * @param list  The list to free (may be NULL).
 * Ownership: takes @p list; borrowed entry pointers become invalid.
 * Threads: not while another thread reads the list.
 */
ACCEL_API void accel_object_list_free(accel_object_list_t *list) ACCEL_NOEXCEPT;
/**
 * `set_trigger`: raise this process's trigger (local, no communication), e.g. when its loss diverged.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_set_trigger(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * `check_trigger`: *out is true on every process when any process called set_trigger since the last
 * check_trigger that returned true (one all-reduce: call it on every process, at the same point); the
 * trigger is then cleared. *out is false on failure.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_check_trigger(accel_accelerator_t *accelerator,
                                                                          bool *out) ACCEL_NOEXCEPT;
/**
 * Block until every process reaches this call (`wait_for_everyone`, a barrier).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_wait_for_everyone(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * Enter `main_process_first()`: the other processes wait here until the main process (rank 0) calls
 * accel_accelerator_main_process_first_end(), so the main process runs the block first. Every process
 * must call begin and end exactly once per block; pairs nest.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_main_process_first_begin(
    accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * Leave `main_process_first()` (the main process waits here for the others). ACCEL_ERR_FAILED_PRECONDITION without a begin.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_main_process_first_end(
    accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * As main_process_first_begin with the local main process (local rank 0) of each machine (`local_main_process_first`).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_local_main_process_first_begin(
    accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * Leave `local_main_process_first()`. Pairs with accel_accelerator_local_main_process_first_begin().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_local_main_process_first_end(
    accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;
/**
 * Number of processes on this machine (LOCAL_WORLD_SIZE).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_num_local_processes(
    const accel_accelerator_t *accelerator, int32_t *out) ACCEL_NOEXCEPT;
/**
 * Whether this is the last process (rank num_processes - 1).
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_is_last_process(const accel_accelerator_t *accelerator,
                                                                           bool *out) ACCEL_NOEXCEPT;
/**
 * The communication backend in use: "single" (one process), "gloo", "mpi" or "nccl". *out is a static string:
 * never free it.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives a static NUL-terminated string (never free it); NULL on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_distributed_backend(
    const accel_accelerator_t *accelerator, const char **out) ACCEL_NOEXCEPT;
/**
 * Statistics of the data-parallel gradient synchronisation of every prepared model, as JSON:
 * {"backend", "num_processes", "models": [{"num_buckets", "bucket_bytes", "bucket_sizes", "syncs",
 * "sync_seconds" (first bucket launched to last one reduced, summed over syncs), "wait_seconds" (time
 * spent waiting after backward)}]}. For benchmarks and diagnostics; keys may be added.
 * Ownership: free *out with accel_string_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_ddp_stats_json(const accel_accelerator_t *accelerator,
                                                                              char **out) ACCEL_NOEXCEPT;
/**
 * This process's place on the device mesh (parallelism_config; docs/guides/parallelism.md), as JSON with
 * Accelerate's names: {"world_size", "rank", "data_parallel_rank" / "data_parallel_size" (the dp_replicate
 * dimension, as Accelerate's data_parallel_rank), "data_parallel_shard_rank" / "_size" (dp_shard),
 * "tensor_parallel_rank" / "_size", "context_parallel_rank" / "_size", "pipeline_parallel_rank" / "_size",
 * "mesh": {"dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_shard_cp", "dp_cp": {"size", "rank"}}} ("dp": the
 * data shards, which get different batches), and once a pipeline-parallel model is prepared "pipeline":
 * {"schedule", "num_micro_batches", "chunks" (model chunks per stage), "last_step": {"wall_seconds",
 * "busy_seconds" (this stage's forwards, losses and backwards), "bubble" (1 - busy / wall), "peak_live_micro_batches"}}
 * of this rank's stage (the bubble of pp_size / num_micro_batches / pp_schedule measured). Without a
 * parallelism_config the mesh is what the plugins imply: (processes, 1) for DDP, (1, processes) sharded. Keys may
 * be added. No communication.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: free *out with accel_string_free().
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_parallel_ranks_json(
    const accel_accelerator_t *accelerator, char **out) ACCEL_NOEXCEPT;

/* ---- Sharded training (fsdp_plugin / deepspeed_plugin; docs/guides/sharded-training.md) ---- */

/**
 * Memory accounting of this process, as JSON: {"rank", "num_processes", "strategy" ("NONE", "DDP", an FSDP
 * strategy or "ZERO_<stage>"), "models": [{"parameter_bytes" (persistent parameter storage: shards under
 * ZeRO-3/FULL_SHARD/SHARD_GRAD_OP, in memory now), "gradient_bytes" (gradient storage now allocated), "optimizer_state_bytes" (in memory now), "model_state_bytes" (the sum of the three), "gathered_bytes" (full
 * buffers of sharded units now allocated), "peak_gathered_bytes", "peak_parameter_gradient_gathered_bytes",
 * "ddp_bucket_bytes" (DDP's flat gradient copies, not in model_state_bytes), "offloaded_bytes" (optimizer state
 * kept outside process memory: in offload_optimizer_nvme_path's files with "nvme"; all of it with "cpu", which
 * in this CPU build is host memory already), "peak_optimizer_state_bytes" (the most optimizer state in memory at
 * once: with "nvme", during steps; otherwise the bytes now), "offloaded_parameter_bytes" (offload_param_device:
 * with "nvme" the parameter shards now in offload_param_nvme_path's files, not in parameter_bytes; with "cpu"
 * or FSDP's cpu_offload all of parameter_bytes, host memory already), "num_units", "all_gathers" and
 * "gradient_reductions" (the sharding engine's collectives since prepare: one per unit under FSDP, one per bucket
 * of consecutive units under deepspeed_plugin; 0 unsharded)}], "peak_rss_bytes"}. One entry per
 * prepared model, in preparation order. Ownership: free *out with accel_string_free().
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param out  Receives a NUL-terminated string owned by the caller, who frees it with accel_string_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_memory_stats_json(
    const accel_accelerator_t *accelerator, char **out) ACCEL_NOEXCEPT;
/**
 * FSDP's summon_full_params for a sharded @p model: gathers every parameter so that it can be read
 * (accel_model_get_tensor) or written (accel_model_load_state_dict) on this process. Collective: every
 * process calls it. _end writes the (possibly changed) values back to the shards and frees the full
 * buffers. Between them no forward or backward may run.
 * @return ACCEL_ERR_FAILED_PRECONDITION when the model is not sharded, not prepared by @p accelerator, or
 *         begin/end do not pair.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  A sharded model prepared by @p accelerator (borrowed). Must not be NULL.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_summon_full_params_begin(accel_accelerator_t *accelerator,
                                                                                   accel_model_t *model) ACCEL_NOEXCEPT;
/**
 * Ends accel_accelerator_summon_full_params_begin(): writes the values back to the shards and frees the full buffers. Collective.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param model  The model passed to accel_accelerator_summon_full_params_begin() (borrowed). Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_FAILED_PRECONDITION without a matching begin.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_summon_full_params_end(accel_accelerator_t *accelerator,
                                                                                 accel_model_t *model) ACCEL_NOEXCEPT;

/**
 * Rank of this process on its machine from the launcher's environment (0 when not launched).
 *
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_get_local_index(int32_t *out) ACCEL_NOEXCEPT;
/**
 * Number of processes on this machine from the launcher's environment (1 when not launched).
 *
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_get_local_count(int32_t *out) ACCEL_NOEXCEPT;
/**
 * Whether this process is local rank 0.
 *
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_process_is_local_main(bool *out) ACCEL_NOEXCEPT;

/**
 * Enter `accelerator.join_uneven_inputs(joinables, even_batches)`: a scope in which DDP tolerates processes
 * running out of batches at different steps (PyTorch's Join with DDP's join hook). Inside it, each process
 * with batches announces every buffer broadcast and gradient all-reduce of a joinable model with one small
 * all-reduce; accel_accelerator_join_uneven_inputs_end() on a process that ran out answers those with zeros
 * and shadows the collectives until every process reached the end. Gradients stay divided by the whole
 * data-parallel size (Join's divide_by_initial_world_size=True), so a finished process counts as a zero
 * gradient. At the end every joinable's parameters and buffers are broadcast from the last process to finish.
 * Join is on only when even_batches (the override, else dataloader_config.even_batches) is false and a
 * joinable is DDP-wrapped; otherwise the scope only applies the override (one process: no effect).
 * Collectives other than the joinables' (gather, wait_for_everyone, ...) are not shadowed, as in PyTorch.
 * Must be paired with accel_accelerator_join_uneven_inputs_end(); nesting is ACCEL_ERR_FAILED_PRECONDITION;
 * with fsdp_plugin / deepspeed_plugin it is ACCEL_ERR_UNIMPLEMENTED.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param joinables  Models prepared by @p accelerator (borrowed), or NULL with @p num_joinables 0 for every
 *                   prepared model.
 * @param num_joinables  Number of entries in @p joinables.
 * @param even_batches  -1: keep each data loader's setting; 0 or 1: override even_batches of every prepared
 *                      map-style, non-dispatching data loader from its next pass until the scope ends.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_join_uneven_inputs_begin(accel_accelerator_t *accelerator,
                                                                                   accel_model_t *const *joinables,
                                                                                   size_t num_joinables,
                                                                                   int32_t even_batches) ACCEL_NOEXCEPT;
/**
 * Leave join_uneven_inputs: restores the data loaders' even_batches and, when join is on, shadows the other
 * processes' steps until all arrived, then broadcasts the final weights (collective). The scope has ended
 * when this returns, whatever the status.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_FAILED_PRECONDITION without a matching begin, or when the processes with batches
 *         issued different collectives (e.g. no_sync at different micro-steps); a collective's failure.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_join_uneven_inputs_end(accel_accelerator_t *accelerator)
    ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_ACCELERATOR_H */
