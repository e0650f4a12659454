#include "model/linear.hpp"

#include "common/error.hpp"
#include "model/plain_linear.hpp"

#include <ATen/ExpandUtils.h>

#include <string>

namespace accel {

namespace {

// LibTorch 1.13's mm_mat1_backward / mm_mat2_backward (autograd/FunctionsManual.cpp, not exported) for real
// tensors and alpha 1: an operand stored column-major gets its gradient column-major, through the transposed product.
at::Tensor mm_mat1_grad(const at::Tensor &grad, const at::Tensor &mat1, const at::Tensor &mat2)
{
    if (mat1.stride(0) == 1 && mat1.stride(1) == mat1.size(0)) return mat2.mm(grad.t()).t();
    return grad.mm(mat2.t());
}

at::Tensor mm_mat2_grad(const at::Tensor &grad, const at::Tensor &mat1, const at::Tensor &mat2)
{
    if (mat2.stride(0) == 1 && mat2.stride(1) == mat2.size(0)) return grad.t().mm(mat1).t();
    return mat1.t().mm(grad);
}

class PlainLinear final : public Linear {
public:
    PlainLinear(at::Tensor weight, at::Tensor bias, Layout layout)
        : weight_(std::move(weight)), bias_(std::move(bias)), layout_(layout)
    {
    }

    at::Tensor forward(const at::Tensor &x) override { return plain_linear(x, weight_, bias_, layout_); }
    const at::Tensor &weight() const override { return weight_; }
    const at::Tensor &bias() const override { return bias_; }
    Layout layout() const override { return layout_; }

private:
    at::Tensor weight_, bias_;
    Layout layout_;
};

} // namespace

at::Tensor plain_linear(const at::Tensor &x, const at::Tensor &weight, const at::Tensor &bias, Linear::Layout layout)
{
    if (layout == Linear::Layout::OutIn) return at::linear(x, weight, bias);
    // HF's Conv1D: addmm(bias, x, W) on [*, in] flattened to 2-D.
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = weight.size(1);
    at::Tensor flat = x.reshape({-1, x.size(-1)});
    at::Tensor y = bias.defined() ? at::addmm(bias, flat, weight) : at::mm(flat, weight);
    return y.view(out_sizes);
}

// Every form the forward takes (at::linear's addmm on the flattened input, its matmul, which folds the leading
// dimensions into one mm, and Conv1D's addmm / mm) is one product of [N, in] by the weight as [in, out]: its
// backward is mm's, the flattening's and the bias's broadcast summed back (autograd's sum_to).
LinearGradients plain_linear_backward(const at::Tensor &grad, const at::Tensor &x, const at::Tensor &weight,
                                      const at::Tensor &bias, Linear::Layout layout, std::array<bool, 3> needed)
{
    if (!x.is_contiguous()) fail(ACCEL_ERR_INTERNAL, "linear backward: the input must be contiguous");
    const at::Tensor mat1 = x.reshape({-1, x.size(-1)});
    const at::Tensor mat2 = layout == Linear::Layout::OutIn ? weight.t() : weight;
    const at::Tensor g = grad.reshape({-1, mat2.size(1)});
    LinearGradients out;
    if (needed[0]) out.input = mm_mat1_grad(g, mat1, mat2).reshape(x.sizes());
    if (needed[1]) {
        at::Tensor w = mm_mat2_grad(g, mat1, mat2);
        out.weight = layout == Linear::Layout::OutIn ? w.t() : w;
    }
    if (needed[2] && bias.defined()) out.bias = at::sum_to(g, bias.sizes());
    return out;
}

bool is_plain_linear(const Linear &layer) { return dynamic_cast<const PlainLinear *>(&layer) != nullptr; }

std::shared_ptr<Linear> make_linear(at::Tensor weight, at::Tensor bias, Linear::Layout layout)
{
    if (!weight.defined() || weight.dim() != 2)
        fail(ACCEL_ERR_INTERNAL, "linear: the weight must be a 2-D tensor");
    const int64_t out = weight.size(layout == Linear::Layout::OutIn ? 0 : 1);
    if (bias.defined() && (bias.dim() != 1 || bias.size(0) != out))
        fail(ACCEL_ERR_INTERNAL, "linear: bias of " + std::to_string(bias.numel()) + " elements for " +
                                     std::to_string(out) + " outputs");
    return std::make_shared<PlainLinear>(std::move(weight), std::move(bias), layout);
}

} // namespace accel
