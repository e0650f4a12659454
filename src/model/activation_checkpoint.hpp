// Activation checkpointing of one layer, as torch.utils.checkpoint with preserve_rng_state: the forward
// keeps only the layer's input; backward runs the layer again (same CPU generator state, same autocast)
// and differentiates that. Used by the gpt model's blocks and by JSON-spec models' layers.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace accel {

using LayerForward = std::function<at::Tensor(const at::Tensor &input)>;
using MultiForward = std::function<at::Tensor(const std::vector<at::Tensor> &inputs)>;

// A generator other than the device's default one that the recomputed code draws from (tensor parallelism's
// per-rank dropout generator): its state is read before the forward and set again around the rerun.
struct ExtraGenerator {
    std::function<at::Tensor()> get_state;
    std::function<void(const at::Tensor &)> set_state;
};

// `forward` computes the layer from `input`, reading `params` (the layer's parameters: inputs of the
// checkpoint's autograd node, so their gradients reach AccumulateGrad and every gradient hook as usual).
// `random`: the layer draws random numbers (dropout in training); the generator is restored for the rerun.
// `extra`: generators besides the default one that the layer draws from when `random`.
at::Tensor checkpoint_layer(const at::Tensor &input, const std::vector<at::Tensor> &params, LayerForward forward,
                            bool random, std::vector<ExtraGenerator> extra = {});

// The same over several inputs (Megatron's selective recomputation of the attention core: q, k and v in, the
// attention output out): only `inputs` are kept, everything `forward` makes from them is made again in backward.
at::Tensor checkpoint_function(const std::vector<at::Tensor> &inputs, const std::vector<at::Tensor> &params,
                               MultiForward forward, bool random, std::vector<ExtraGenerator> extra = {});

} // namespace accel
