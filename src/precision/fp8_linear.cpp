#include "precision/fp8_linear.hpp"

#include "precision/fp8.hpp"

namespace accel::fp8 {

namespace {

class Fp8Linear final : public Linear {
public:
    Fp8Linear(std::shared_ptr<Linear> inner, const config::FP8RecipeKwargs &recipe)
        : inner_(std::move(inner)), state_(c10::make_intrusive<LinearState>(recipe))
    {
    }

    at::Tensor forward(const at::Tensor &x) override
    {
        return enabled() ? linear(x, inner_->weight_out_in(), inner_->bias(), state_) : inner_->forward(x);
    }
    const at::Tensor &weight() const override { return inner_->weight(); }
    const at::Tensor &bias() const override { return inner_->bias(); }
    Layout layout() const override { return inner_->layout(); }
    bool stateful_forward() const override { return true; }

private:
    std::shared_ptr<Linear> inner_;
    c10::intrusive_ptr<LinearState> state_;
};

} // namespace

std::shared_ptr<Linear> make_fp8_linear(std::shared_ptr<Linear> inner, const config::FP8RecipeKwargs &recipe)
{
    return std::make_shared<Fp8Linear>(std::move(inner), recipe);
}

} // namespace accel::fp8
