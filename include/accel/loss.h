/** @file
 * loss functions by name. */
#ifndef ACCEL_LOSS_H
#define ACCEL_LOSS_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/**
 * Compute a mean-reduced loss, keeping the autograd graph so the result can be passed to
 * accel_accelerator_backward(). Names and the targets they take:
 *   "cross_entropy"   outputs [N, C] logits, targets [N] int64 class indices
 *   "nll"             outputs [N, C] log-probabilities, targets [N] int64
 *   "mse", "l1", "smooth_l1"  targets of the outputs' shape (floating)
 *   "bce_with_logits" targets of the outputs' shape (floating, 0..1)
 *   "causal_lm"       outputs [..., V] logits (a gpt model's [B, T, V]), targets [...] int64 next-token
 *                     ids (accel_dataloader_create_from_tokens's labels: already shifted, unlike
 *                     Hugging Face's labels = input_ids); cross entropy averaged over the positions
 *                     whose label is not ignore_index
 * @p name may also be a JSON object {"type": \<a name above\>, "ignore_index": -100} (ignore_index for
 * "cross_entropy", "nll" and "causal_lm" only; default -100, as PyTorch's). When every label is
 * ignored the mean is NaN, as in PyTorch.
 * Wrong dtypes or shapes are ACCEL_ERR_INVALID_ARGUMENT naming the argument.
 * Ownership: borrows the inputs; free *out with accel_tensor_free().
 *
 * @param name  Loss name or JSON object, as above. Must not be NULL.
 * @param outputs  The model's outputs (borrowed). Must not be NULL.
 * @param targets  The labels (borrowed). Must not be NULL.
 * @param out  Receives a new tensor handle, owned by the caller, who frees it with accel_tensor_free(); NULL on
 *             failure. Must not be NULL.
 * @return ACCEL_OK, or the status naming the problem (its message: accel_last_error_message()).
 * Threads: safe from any thread for tensors no other thread is using.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_loss_compute(const char *name, const accel_tensor_t *outputs,
                                                            const accel_tensor_t *targets,
                                                            accel_tensor_t **out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_LOSS_H */
