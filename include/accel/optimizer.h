/** @file
 * optimizers over a model's parameters. */
#ifndef ACCEL_OPTIMIZER_H
#define ACCEL_OPTIMIZER_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Create an optimizer over every parameter of @p model from JSON:
 *   {"type": "sgd", "lr": 0.1, "momentum": 0.0, "dampening": 0.0, "nesterov": false, "weight_decay": 0.0}
 *   {"type": "adam" | "adamw", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0 (adamw: 0.01),
 *    "amsgrad": false}
 *   {"type": "adagrad", "lr": 1e-2, "lr_decay": 0, "weight_decay": 0, "initial_accumulator_value": 0, "eps": 1e-10}
 *   {"type": "rmsprop", "lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0, "momentum": 0, "centered": false}
 *   {"type": "dummy", "lr": 1e-3, "weight_decay": 0}: Accelerate's DummyOptim, which prepare replaces with
 *   deepspeed_plugin.hf_ds_config's optimizer block (it cannot step before)
 * Any type but "dummy" also takes "param_groups": [{"params": ["name pattern", ...], hyperparameters...}, ...]
 * (docs/guides/optimizers.md). Defaults are PyTorch's. The optimizer keeps the model's parameters alive.
 * Ownership: borrows @p model; free *out with accel_optimizer_free().
 *
 * @param model  The model whose parameters are optimized (borrowed; its parameters are kept alive). Must not be
 *               NULL.
 * @param config_json  JSON object as above (read during the call). Must not be NULL.
 * @param out  Receives a new optimizer handle, owned by the caller, who frees it with accel_optimizer_free(); NULL
 *             on failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_create(accel_model_t *model, const char *config_json,
                                                                accel_optimizer_t **out) ACCEL_NOEXCEPT;

/**
 * Frees the handle. NULL is fine; any order is safe.
 *
 * @param optimizer  The handle to free, or NULL (then nothing happens).
 * Ownership: takes @p optimizer: it must not be used after the call.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_API void accel_optimizer_free(accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;

/**
 * One optimizer step. Once prepared, the step does nothing while gradients are being accumulated
 * (sync_gradients false), as Accelerate's AcceleratedOptimizer.
 *
 * @param optimizer  The optimizer (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_step(accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;

/**
 * Clear gradients (set_to_none, Accelerate's default). Once prepared, does nothing while gradients are
 * being accumulated.
 *
 * @param optimizer  The optimizer (borrowed for the call). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_zero_grad(accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;

/**
 * Learning rate of the first parameter group.
 *
 * @param optimizer  The optimizer (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_get_lr(const accel_optimizer_t *optimizer,
                                                                double *out) ACCEL_NOEXCEPT;
/**
 * Set the learning rate of every parameter group; @p lr must be finite and >= 0.
 *
 * @param optimizer  The optimizer (borrowed for the call). Must not be NULL.
 * @param lr  The learning rate; finite and >= 0.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_set_lr(accel_optimizer_t *optimizer,
                                                                double lr) ACCEL_NOEXCEPT;

/**
 * Whether the last accel_optimizer_step() was skipped (by the gradient scaler finding inf/NaN).
 *
 * @param optimizer  The optimizer (borrowed for the call). Must not be NULL.
 * @param out  Receives the result (0 / false on failure). Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_get_step_was_skipped(const accel_optimizer_t *optimizer,
                                                                              bool *out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_OPTIMIZER_H */
