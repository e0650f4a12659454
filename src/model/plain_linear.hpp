// The plain layer's arithmetic (make_linear) on tensors passed in, forward and backward, for layers that keep less
// for backward than autograd would keep for that product: sequence parallelism's column layer keeps its input's
// sequence shard and gathers it again in backward (parallel/tensor_parallel/parallel_linear.cpp, as Megatron-LM's
// LinearWithGradAccumulationAndAsyncCommunication). Backward runs the kernels LibTorch's autograd runs for the
// forward's product (addmm / mm backward, view backward, the broadcast bias summed), on the same operands, so the
// gradients are autograd's bit for bit.
#pragma once

#include "model/linear.hpp"

#include <array>

namespace accel {

// What the plain layer computes: y = x Wᵀ + b over the last dimension of `x` (`weight` in `layout`).
at::Tensor plain_linear(const at::Tensor &x, const at::Tensor &weight, const at::Tensor &bias, Linear::Layout layout);

struct LinearGradients {
    at::Tensor input, weight, bias;
};

// The gradients of plain_linear(x, weight, bias, layout) given `grad` (of y), each only where `needed` says
// (input, weight, bias); `x` is the forward's input (contiguous: it is flattened as the forward flattened it).
LinearGradients plain_linear_backward(const at::Tensor &grad, const at::Tensor &x, const at::Tensor &weight,
                                      const at::Tensor &bias, Linear::Layout layout, std::array<bool, 3> needed);

// Whether `layer` is the plain one (make_linear), whose forward plain_linear is.
bool is_plain_linear(const Linear &layer);

} // namespace accel
