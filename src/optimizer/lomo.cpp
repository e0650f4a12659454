#include "optimizer/lomo.hpp"

#include "common/error.hpp"
#include "optimizer/state_key.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>

namespace accel {

namespace optim = torch::optim;

at::Tensor LomoOptimizer::step(LossClosure)
{
    fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: a lomo / adalomo optimizer updates the parameters inside "
                                        "accel_accelerator_lomo_backward (Accelerate's lomo_backward) and has no step");
}

void LomoOptimizer::begin_norm() { norms_.clear(); }

void LomoOptimizer::add_to_norm(const at::Tensor &grad)
{
    norms_.push_back(at::norm(grad.to(at::kFloat).div(loss_scale()), 2.0));
}

double LomoOptimizer::end_norm()
{
    // The norm of all gradients as one vector: the norm of the per-parameter norms.
    const double total = norms_.empty() ? 0.0 : at::norm(at::stack(norms_), 2.0).item<double>();
    norms_.clear();
    return std::min(clip_grad_norm() / (total + 1e-6), 1.0);
}

void LomoOptimizer::begin_update(double lr, double clip_coef)
{
    lr_ = lr;
    clip_coef_ = clip_coef;
}

void LomoOptimizer::update(const at::Tensor &param, const at::Tensor &grad)
{
    at::NoGradGuard no_grad;
    at::Tensor g = grad.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true); // a copy: the clipping is in place
    if (loss_scale() != 1.0) g.div_(loss_scale());
    if (clip_grad_value() > 0) g.clamp_(-clip_grad_value(), clip_grad_value());
    if (clip_grad_norm() > 0) g.mul_(clip_coef_);
    // The parameter's storage with a version counter of its own (Python's p.data): the graph being run may
    // have saved the parameter, and changing it after its gradient is complete must not fail those checks.
    at::Tensor data = param.variable_data();
    at::Tensor p32 = data.to(at::kFloat); // the parameter itself when it is float32
    apply(param, p32, g);
    if (!p32.is_same(data)) data.copy_(p32);
}

Lomo::Lomo(std::vector<optim::OptimizerParamGroup> groups, LomoOptions defaults)
    : LomoOptimizer(std::move(groups), std::make_unique<LomoOptions>(defaults))
{
}

const LomoOptions &Lomo::options() const { return static_cast<const LomoOptions &>(param_groups().at(0).options()); }

void Lomo::apply(const at::Tensor &, at::Tensor &p32, const at::Tensor &grad32)
{
    const LomoOptions &o = options();
    if (o.weight_decay() > 0) p32.mul_(1.0 - lr_ * o.weight_decay());
    p32.add_(grad32, -lr_);
}

AdaLomo::AdaLomo(std::vector<optim::OptimizerParamGroup> groups, AdaLomoOptions defaults)
    : LomoOptimizer(std::move(groups), std::make_unique<AdaLomoOptions>(defaults))
{
}

const AdaLomoOptions &AdaLomo::options() const
{
    return static_cast<const AdaLomoOptions &>(param_groups().at(0).options());
}

void AdaLomo::begin_update(double lr, double clip_coef)
{
    LomoOptimizer::begin_update(lr, clip_coef);
    // Counted from the state (a loaded checkpoint carries it); every parameter has taken as many steps.
    int64_t taken = step_;
    for (const auto &p : params()) {
        auto it = state().find(key_of(p));
        if (it != state().end()) taken = std::max(taken, static_cast<const AdaLomoParamState &>(*it->second).step());
    }
    step_ = taken + 1;
}

void AdaLomo::apply(const at::Tensor &param, at::Tensor &p32, const at::Tensor &grad32)
{
    const AdaLomoOptions &o = options();
    auto &slot = state()[key_of(param)];
    if (!slot) slot = std::make_unique<AdaLomoParamState>();
    auto &s = static_cast<AdaLomoParamState &>(*slot);
    // Zeros where there is no moment yet (first step, or a loaded state without this parameter's kind).
    const auto f32 = param.options().dtype(at::kFloat);
    if (param.dim() <= 1) {
        if (!s.exp_avg_sq().defined()) s.exp_avg_sq(at::zeros(param.sizes(), f32));
    } else if (!s.exp_avg_sq_row().defined() || !s.exp_avg_sq_col().defined()) {
        // Adafactor's factors: the mean over the last dimension, and over the one before it.
        auto sizes = param.sizes().vec();
        std::vector<int64_t> rows(sizes.begin(), sizes.end() - 1), cols(sizes.begin(), sizes.end() - 2);
        cols.push_back(sizes.back());
        s.exp_avg_sq_row(at::zeros(rows, f32));
        s.exp_avg_sq_col(at::zeros(cols, f32));
    }
    s.step(step_);
    // beta2 of step t is 1 - t^decay_rate (0 on the first step: the first squares are taken whole).
    const double beta2t = 1.0 - std::pow(static_cast<double>(step_), o.decay_rate());
    at::Tensor update = grad32.pow(2).add_(o.eps());
    if (param.dim() > 1) {
        s.exp_avg_sq_row().mul_(beta2t).add_(update.mean(-1), 1.0 - beta2t);
        s.exp_avg_sq_col().mul_(beta2t).add_(update.mean(-2), 1.0 - beta2t);
        const at::Tensor &row = s.exp_avg_sq_row();
        at::Tensor r = row.div(row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
        at::Tensor c = s.exp_avg_sq_col().unsqueeze(-2).rsqrt();
        update = r.mul(c).mul_(grad32);
    } else {
        s.exp_avg_sq().mul_(beta2t).add_(update, 1.0 - beta2t);
        update = s.exp_avg_sq().rsqrt().mul_(grad32);
    }
    // Update clipping: its RMS at most clip_threshold.
    const at::Tensor rms = update.norm(2.0).div(std::sqrt(static_cast<double>(update.numel())));
    update.div_(rms.div(o.clip_threshold()).clamp_min(1.0));
    // The step is relative to the parameter's own RMS (at least eps2).
    const double p_rms = p32.norm(2.0).item<double>() / std::sqrt(static_cast<double>(param.numel()));
    const double lr = lr_ * std::max(o.eps2(), p_rms);
    if (o.weight_decay() > 0) p32.mul_(1.0 - lr * o.weight_decay());
    p32.add_(update, -lr);
}

std::unique_ptr<optim::Optimizer> make_lomo_optimizer(const std::vector<at::Tensor> &params, const config::OptimizerConfig &c)
{
    std::vector<optim::OptimizerParamGroup> groups;
    if (c.type == "lomo") {
        LomoOptions o(c.lr);
        o.weight_decay(c.weight_decay).clip_grad_norm(c.clip_grad_norm).clip_grad_value(c.clip_grad_value);
        groups.emplace_back(params, std::make_unique<LomoOptions>(o));
        return std::make_unique<Lomo>(std::move(groups), o);
    }
    AdaLomoOptions o(c.lr);
    o.weight_decay(c.weight_decay).clip_grad_norm(c.clip_grad_norm).clip_grad_value(c.clip_grad_value);
    o.loss_scale(c.loss_scale).eps(c.eps).eps2(c.eps2).clip_threshold(c.clip_threshold).decay_rate(c.decay_rate);
    groups.emplace_back(params, std::make_unique<AdaLomoOptions>(o));
    return std::make_unique<AdaLomo>(std::move(groups), o);
}

namespace {

// Runs before AccumulateGrad with the parameter's summed gradient; returning an undefined gradient makes
// AccumulateGrad return at once (it stores nothing in .grad).
struct ApplyAndDrop : torch::autograd::FunctionPreHook {
    at::Tensor param;
    std::function<void(const at::Tensor &, const at::Tensor &)> on_grad;
    torch::autograd::variable_list operator()(const torch::autograd::variable_list &grads) override
    {
        if (grads.empty() || !grads[0].defined()) return grads;
        on_grad(param, grads[0]);
        return {at::Tensor()};
    }
};

} // namespace

struct GradientHooks::Installed {
    std::shared_ptr<torch::autograd::Node> accumulator;
    torch::autograd::FunctionPreHook *hook;
};

GradientHooks::GradientHooks(const std::vector<at::Tensor> &params,
                             std::function<void(const at::Tensor &, const at::Tensor &)> on_grad)
{
    for (const auto &p : params) {
        // Only an accumulator that exists belongs to the graph of the loss (the graph holds it); making one
        // here would hook a node no backward reaches.
        auto acc = torch::autograd::impl::try_get_grad_accumulator(p);
        if (!acc) continue;
        auto hook = std::make_unique<ApplyAndDrop>();
        hook->param = p;
        hook->on_grad = on_grad;
        installed_.push_back({acc, hook.get()});
        acc->add_pre_hook(std::move(hook));
    }
}

GradientHooks::~GradientHooks()
{
    for (auto &i : installed_) {
        auto &hooks = i.accumulator->pre_hooks();
        hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](const auto &h) { return h.get() == i.hook; }),
                    hooks.end());
    }
}

} // namespace accel
