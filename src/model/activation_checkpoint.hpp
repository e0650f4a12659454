// Activation checkpointing of one layer, as torch.utils.checkpoint with preserve_rng_state: the forward
// keeps only the layer's input; backward runs the layer again (same CPU generator state, same autocast)
// and differentiates that. Used by the gpt model's blocks and by JSON-spec models' layers.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace accel {

using LayerForward = std::function<at::Tensor(const at::Tensor &input)>;

// `forward` computes the layer from `input`, reading `params` (the layer's parameters: inputs of the
// checkpoint's autograd node, so their gradients reach AccumulateGrad and every gradient hook as usual).
// `random`: the layer draws random numbers (dropout in training); the generator is restored for the rerun.
at::Tensor checkpoint_layer(const at::Tensor &input, const std::vector<at::Tensor> &params, LayerForward forward,
                            bool random);

} // namespace accel
