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

// How a plan split one parameter: along `dim` (-1: replicated, every rank holds it whole) in `groups`
// blocks; `whole` is its unsplit size along dim (the vocabulary before padding).
struct ParameterSlicing {
    int64_t dim = -1;
    int64_t groups = 1;
    int64_t whole = 0;
};

// Rank `rank`'s part of the whole parameter: a replicated one as is, a split one sliced, its dimension first
// padded with zero rows up to a multiple of `size` where groups is 1 (the vocabulary, as Megatron pads it).
at::Tensor slice_parameter(const at::Tensor &whole, const ParameterSlicing &s, int64_t rank, int64_t size);

} // namespace accel::parallel::tp
