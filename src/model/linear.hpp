// The linear seam (architecture.md, "The seams"): every model computes its affine layers through a
// Linear, so that fp8, tensor-parallel (column/row) layers, LoRA and 4-/8-bit layers replace a linear,
// not a model. A Linear computes y = x Wᵀ + b over its last dimension; it does not own the parameters'
// names (the model registers them, so state-dict keys never depend on which implementation computes).
//
// Implementations: the plain one (make_linear), and decorators that wrap another Linear and use its
// weight and bias (precision/fp8_linear.hpp).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace accel {

class Linear {
public:
    // How the weight is stored: [out, in] as torch.nn.Linear, or [in, out] as Hugging Face's Conv1D
    // (GPT-2's c_attn, c_proj, c_fc).
    enum class Layout { OutIn, InOut };

    virtual ~Linear() = default;
    virtual at::Tensor forward(const at::Tensor &input) = 0;
    // The parameters, as the model registered them (the same tensors: a sharding engine's set_data on them
    // is seen here). bias() is undefined for a layer without one.
    virtual const at::Tensor &weight() const = 0;
    virtual const at::Tensor &bias() const = 0;
    virtual Layout layout() const = 0;
    // Whether a forward updates state of its own (fp8's amax history), so that recomputing it in backward
    // (activation checkpointing) would change the result of training.
    virtual bool stateful_forward() const { return false; }
    // Tensors a decorator adds to the computation (LoRA's A and B): a recomputed layer (activation
    // checkpointing) takes them as inputs too, so that their gradients reach them.
    virtual std::vector<at::Tensor> added_parameters() const { return {}; }
    // Whether a forward in training draws random numbers (LoRA's dropout): a recomputation restores the generator.
    virtual bool random_forward() const { return false; }

    // The weight as [out, in], whatever the layout (a view for InOut).
    at::Tensor weight_out_in() const { return layout() == Layout::OutIn ? weight() : weight().t(); }
    // Virtual: a quantized layer's weight() is its packed storage, not [out, in] (src/quantization).
    virtual int64_t in_features() const { return weight().size(layout() == Layout::OutIn ? 1 : 0); }
    virtual int64_t out_features() const { return weight().size(layout() == Layout::OutIn ? 0 : 1); }
};

// The plain layer: at::linear for OutIn (as torch.nn.Linear), addmm over the flattened leading dimensions
// for InOut (as HF's Conv1D: the same kernel, so the same bits, as the models computed before the seam).
std::shared_ptr<Linear> make_linear(at::Tensor weight, at::Tensor bias, Linear::Layout layout);

} // namespace accel
