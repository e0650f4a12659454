// Which part of a whole parameter a tensor-parallel rank holds (pure tensor arithmetic, no communication):
// the plan narrows the model's tensors with these, and checkpoints gather them back in the same order.
#pragma once

#include "model/linear.hpp"

#include <ATen/ATen.h>

#include <cstdint>

namespace accel::parallel::tp {

// The dimension of a linear's weight that holds its outputs (column parallel splits it) and its inputs
// (row parallel splits it), for the seam's two layouts.
int64_t output_dim(Linear::Layout layout);
int64_t input_dim(Linear::Layout layout);

// Rank `rank`'s slice of `t` along `dim` among `size` ranks, where the dimension holds `groups` equal
// consecutive blocks split alike (GPT-2's fused c_attn is [q | k | v]: groups = 3 gives each rank its heads'
// q, k and v). A contiguous copy, so the whole tensor can be freed. INVALID_ARGUMENT naming the sizes when
// the dimension does not divide by groups x size.
at::Tensor slice(const at::Tensor &t, int64_t dim, int64_t rank, int64_t size, int64_t groups = 1);
// The inverse: `parts` (every rank's slice, in rank order) joined into the whole tensor.
at::Tensor join(const std::vector<at::Tensor> &parts, int64_t dim, int64_t groups = 1);

} // namespace accel::parallel::tp
