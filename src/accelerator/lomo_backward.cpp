// Accelerator::lomo_backward (Accelerate's lomo_backward, which calls each LOMO optimizer's fused_backward):
// the prepared lomo / adalomo optimizers update their parameters inside backward, each parameter as soon as
// its gradient is complete, and no gradient is stored (src/optimizer/lomo.hpp).
#include "accelerator/accelerator.hpp"

#include "common/error.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "optimizer/lomo.hpp"
#include "parallel/wrapper.hpp"
#include "precision/grad_scaler.hpp"

#include <cmath>
#include <memory>
#include <vector>

namespace accel {

namespace {

// Gradient bytes alive at once inside a hook: the one being applied, and any the parameters still hold.
int64_t live_gradient_bytes(const LomoOptimizer &opt, const at::Tensor &grad)
{
    int64_t bytes = grad.numel() * static_cast<int64_t>(grad.element_size());
    for (const auto &p : opt.params())
        if (p.grad().defined()) bytes += p.grad().numel() * static_cast<int64_t>(p.grad().element_size());
    return bytes;
}

} // namespace

void Accelerator::lomo_backward(const at::Tensor &loss, double learning_rate)
{
    check_loss(loss);
    if (!std::isfinite(learning_rate) || learning_rate < 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "learning_rate: expected a finite number >= 0, got " + c10::str(learning_rate));
    std::vector<LomoOptimizer *> lomo;
    for (const auto &o : optimizers_) {
        auto *l = dynamic_cast<LomoOptimizer *>(&o->torch_optimizer());
        if (l == nullptr) continue;
        // What a fused update cannot do: there is no gradient left to accumulate, to unscale and check
        // for overflow before the update, or to all-reduce after backward.
        if (state_->gradient.num_steps() > 1)
            fail(ACCEL_ERR_FAILED_PRECONDITION,
                 "lomo_backward: gradient_accumulation_steps is " + std::to_string(state_->gradient.num_steps()) +
                     "; a lomo / adalomo optimizer applies each gradient during backward, so there is none to accumulate "
                     "(use 1)");
        if (state_->scaler && state_->scaler->is_enabled())
            fail(ACCEL_ERR_UNIMPLEMENTED, "lomo_backward: mixed_precision \"fp16\" (a gradient scaler) is not supported "
                                          "with lomo / adalomo: the scaler's overflow check would come after updates "
                                          "already applied (use \"bf16\" or \"no\")");
        if (parallel::ParallelWrapper *w = wrapper_of(*o->model()); w != nullptr)
            fail(ACCEL_ERR_UNIMPLEMENTED,
                 std::string("lomo_backward: a model wrapped for ") +
                     (w->sharded() ? "sharded training" : w->ddp() ? "DDP" : "parallel training") +
                     " is not supported: each gradient would have to be all-reduced inside its hook before the update "
                     "(lomo / adalomo train one process, or one process per model copy without gradient sync)");
        lomo.push_back(l);
    }
    if (lomo.empty())
        fail(ACCEL_ERR_FAILED_PRECONDITION, "lomo_backward: no prepared optimizer is of type \"lomo\" or \"adalomo\" "
                                            "(prepare one with accel_accelerator_prepare_optimizer first)");
    // Each optimizer scales the loss by its own factor (AdaLomo's loss_scale): one backward per factor would
    // be needed, so all must agree (they always do with one optimizer).
    const double scale = lomo.front()->loss_scale();
    for (const auto *l : lomo)
        if (l->loss_scale() != scale)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "lomo_backward: the prepared lomo / adalomo optimizers have different "
                                             "loss_scale values");
    const at::Tensor scaled = scale == 1.0 ? loss : loss * scale;
    auto hook_all = [&](auto on_grad) {
        std::vector<std::unique_ptr<GradientHooks>> hooks;
        for (auto *l : lomo)
            hooks.push_back(std::make_unique<GradientHooks>(l->params(), [l, on_grad](const at::Tensor &p, const at::Tensor &g) {
                l->note_gradient_bytes(live_gradient_bytes(*l, g));
                on_grad(*l, p, g);
            }));
        return hooks;
    };
    // LOMO's clip_grad_norm: a first backward only measures the norm (the graph is kept for the second).
    std::vector<double> coef(lomo.size(), 1.0);
    bool norm_pass = false;
    for (auto *l : lomo) norm_pass = norm_pass || l->clip_grad_norm() > 0;
    if (norm_pass) {
        for (auto *l : lomo) l->begin_norm();
        {
            auto hooks = hook_all([](LomoOptimizer &l, const at::Tensor &, const at::Tensor &g) { l.add_to_norm(g); });
            run_backward(scaled, /*retain_graph=*/true);
        }
        for (size_t i = 0; i < lomo.size(); ++i)
            if (lomo[i]->clip_grad_norm() > 0) coef[i] = lomo[i]->end_norm();
    }
    for (size_t i = 0; i < lomo.size(); ++i) lomo[i]->begin_update(learning_rate, coef[i]);
    auto hooks = hook_all([](LomoOptimizer &l, const at::Tensor &p, const at::Tensor &g) { l.update(p, g); });
    run_backward(scaled, false);
}

} // namespace accel
