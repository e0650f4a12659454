/* accel/optimizer.h - optimizers over a model's parameters. */
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
 * (README, "Optimizer parameter groups"). Defaults are PyTorch's. The optimizer keeps the model's parameters alive.
 * Ownership: borrows @p model; free *out with accel_optimizer_free().
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_create(accel_model_t *model, const char *config_json,
                                                                accel_optimizer_t **out) ACCEL_NOEXCEPT;

/** Frees the handle. NULL is fine; any order is safe. */
ACCEL_API void accel_optimizer_free(accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;

/**
 * One optimizer step. Once prepared, the step does nothing while gradients are being accumulated
 * (sync_gradients false), as Accelerate's AcceleratedOptimizer.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_step(accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;

/**
 * Clear gradients (set_to_none, Accelerate's default). Once prepared, does nothing while gradients are
 * being accumulated.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_zero_grad(accel_optimizer_t *optimizer) ACCEL_NOEXCEPT;

/** Learning rate of the first parameter group. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_get_lr(const accel_optimizer_t *optimizer,
                                                                double *out) ACCEL_NOEXCEPT;
/** Set the learning rate of every parameter group; @p lr must be finite and >= 0. */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_set_lr(accel_optimizer_t *optimizer,
                                                                double lr) ACCEL_NOEXCEPT;

/** Whether the last accel_optimizer_step() was skipped (by the gradient scaler finding inf/NaN). */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_optimizer_get_step_was_skipped(const accel_optimizer_t *optimizer,
                                                                              bool *out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_OPTIMIZER_H */
