#include "model/linear.hpp"

#include "common/error.hpp"

#include <string>

namespace accel {

namespace {

class PlainLinear final : public Linear {
public:
    PlainLinear(at::Tensor weight, at::Tensor bias, Layout layout)
        : weight_(std::move(weight)), bias_(std::move(bias)), layout_(layout)
    {
    }

    at::Tensor forward(const at::Tensor &x) override
    {
        if (layout_ == Layout::OutIn) return at::linear(x, weight_, bias_);
        // HF's Conv1D: addmm(bias, x, W) on [*, in] flattened to 2-D.
        auto out_sizes = x.sizes().vec();
        out_sizes.back() = weight_.size(1);
        at::Tensor flat = x.reshape({-1, x.size(-1)});
        at::Tensor y = bias_.defined() ? at::addmm(bias_, flat, weight_) : at::mm(flat, weight_);
        return y.view(out_sizes);
    }
    const at::Tensor &weight() const override { return weight_; }
    const at::Tensor &bias() const override { return bias_; }
    Layout layout() const override { return layout_; }

private:
    at::Tensor weight_, bias_;
    Layout layout_;
};

} // namespace

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
