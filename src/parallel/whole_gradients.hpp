// Gradient clipping and memory accounting for parameters every rank holds whole: a model no wrapper
// splits (one process, DDP). Shared by the DDP wrapper and the Accelerator's unwrapped models so the
// arithmetic is written once.
#pragma once

#include "parallel/wrapper.hpp"

#include <ATen/ATen.h>

#include <vector>

namespace accel::parallel {

// torch.nn.utils.clip_grad_norm_ over `params`' gradients, with its operations (results match it bit for
// bit); scales the gradients only when `clip`. 0 when no parameter has a gradient.
double whole_clip_grad_norm(const std::vector<at::Tensor> &params, double max_norm, double norm_type, bool clip);
void whole_clip_grad_value(const std::vector<at::Tensor> &params, double clip_value);
// One rank's part of a norm split over ranks (a pipeline's stages, tensor parallelism's slices): the sum of
// |g|^norm_type over `params`' gradients (their largest |g| when norm_type is inf), a float64 [1] on the CPU,
// which the wrapper reduces over its group (Sum, or Max for inf) before taking the root.
at::Tensor grad_norm_part(const std::vector<at::Tensor> &params, double norm_type);
// Bytes of `params` and of their gradients.
WrapperMemory whole_memory(const std::vector<at::Tensor> &params);

} // namespace accel::parallel
