// Loss functions by name, mean-reduced, as torch.nn.functional computes them.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace accel {

enum class LossKind { CrossEntropy, Nll, Mse, L1, SmoothL1, BceWithLogits };

LossKind parse_loss_name(const char *name);
// Validates dtypes and shapes (ACCEL_ERR_INVALID_ARGUMENT naming "outputs" or "targets").
at::Tensor compute_loss(LossKind kind, const at::Tensor &outputs, const at::Tensor &targets);

} // namespace accel
