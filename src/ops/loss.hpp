// Loss functions by name, mean-reduced, as torch.nn.functional computes them.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace accel {

enum class LossKind { CrossEntropy, Nll, Mse, L1, SmoothL1, BceWithLogits, CausalLm };

// A loss and its options (ignore_index: cross_entropy, nll and causal_lm; PyTorch's default -100).
struct Loss {
    Loss(LossKind k) : kind(k) {} // NOLINT(google-explicit-constructor): a bare kind is a loss with defaults
    LossKind kind;
    int64_t ignore_index = -100;
};

LossKind parse_loss_name(const char *name);
// A bare name, or JSON {"type": <name>, "ignore_index": <int>}.
Loss parse_loss(const char *name);
// Validates dtypes and shapes (ACCEL_ERR_INVALID_ARGUMENT naming "outputs" or "targets").
at::Tensor compute_loss(const Loss &loss, const at::Tensor &outputs, const at::Tensor &targets);

} // namespace accel
