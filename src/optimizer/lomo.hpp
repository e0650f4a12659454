// LOMO and AdaLomo (the lomo_optim package's Lomo / AdaLomo, which Accelerate's lomo_backward drives):
// LibTorch optimizers that hold the hyperparameters and AdaLomo's factored second moments but never step
// on their own. Each parameter is updated from its gradient while backward runs (lomo_backward,
// src/accelerator/lomo_backward.cpp, through GradientHooks below), so no gradient of the whole model is
// ever held.
#pragma once

#include "config/optimizer_config.hpp"

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <vector>

namespace accel {

struct LomoOptions : torch::optim::OptimizerCloneableOptions<LomoOptions> {
    explicit LomoOptions(double lr = 1e-3) : lr_(lr) {}
    TORCH_ARG(double, lr);
    TORCH_ARG(double, weight_decay) = 0.0;
    TORCH_ARG(double, clip_grad_norm) = 0.0; // 0: none (Python's None)
    TORCH_ARG(double, clip_grad_value) = 0.0;
    double get_lr() const override { return lr(); }
    void set_lr(const double lr) override { this->lr(lr); }
};

struct AdaLomoOptions : torch::optim::OptimizerCloneableOptions<AdaLomoOptions> {
    explicit AdaLomoOptions(double lr = 1e-3) : lr_(lr) {}
    TORCH_ARG(double, lr);
    TORCH_ARG(double, weight_decay) = 0.0;
    TORCH_ARG(double, clip_grad_norm) = 0.0;
    TORCH_ARG(double, clip_grad_value) = 0.0;
    TORCH_ARG(double, loss_scale) = 1024.0;
    TORCH_ARG(double, eps) = 1e-30;  // added to the squared gradient
    TORCH_ARG(double, eps2) = 1e-3;  // the least parameter RMS the learning rate is scaled by
    TORCH_ARG(double, clip_threshold) = 1.0;
    TORCH_ARG(double, decay_rate) = -0.8;
    double get_lr() const override { return lr(); }
    void set_lr(const double lr) override { this->lr(lr); }
};

// AdaLomo's per-parameter state: the steps taken, and the second moments (exp_avg_sq for parameters of at most
// one dimension; else Adafactor's row and column means, exp_avg_sq_row / exp_avg_sq_col).
struct AdaLomoParamState : torch::optim::OptimizerCloneableParamState<AdaLomoParamState> {
    TORCH_ARG(int64_t, step) = 0;
    TORCH_ARG(at::Tensor, exp_avg_sq);
    TORCH_ARG(at::Tensor, exp_avg_sq_row);
    TORCH_ARG(at::Tensor, exp_avg_sq_col);
};

class LomoOptimizer : public torch::optim::Optimizer {
public:
    using Optimizer::Optimizer;
    // An update happens only in lomo_backward: INVALID precondition, naming it.
    at::Tensor step(LossClosure closure = nullptr) override;
    // The parameters it updates (its one group).
    const std::vector<at::Tensor> &params() const { return param_groups().at(0).params(); }

    // One lomo_backward: the factor the loss is multiplied by (the gradients are divided by it again), then,
    // when clip_grad_norm is set, a first backward whose gradients only add to the norm, then the backward
    // whose gradients update the parameters (clipped by value, then by the norm's coefficient).
    virtual double loss_scale() const { return 1.0; }
    virtual double clip_grad_norm() const = 0;
    virtual double clip_grad_value() const = 0;
    void begin_norm();
    void add_to_norm(const at::Tensor &grad);
    // Returns min(clip_grad_norm / (total norm + 1e-6), 1), as LOMO's grad_norm.
    double end_norm();
    virtual void begin_update(double lr, double clip_coef);
    void update(const at::Tensor &param, const at::Tensor &grad);

    // The most gradient bytes alive at once inside any hook so far: the gradient being applied plus every
    // gradient the parameters hold (what a whole-model optimizer would keep until its step).
    int64_t peak_gradient_bytes() const { return peak_gradient_bytes_; }
    void note_gradient_bytes(int64_t bytes) { peak_gradient_bytes_ = std::max(peak_gradient_bytes_, bytes); }

protected:
    // The update of one parameter (float32 view `p32`) from its unscaled, clipped float32 gradient.
    virtual void apply(const at::Tensor &param, at::Tensor &p32, const at::Tensor &grad32) = 0;
    double lr_ = 0.0;

private:
    double clip_coef_ = 1.0;
    std::vector<at::Tensor> norms_;
    int64_t peak_gradient_bytes_ = 0;
};

class Lomo final : public LomoOptimizer {
public:
    Lomo(std::vector<torch::optim::OptimizerParamGroup> groups, LomoOptions defaults);
    double clip_grad_norm() const override { return options().clip_grad_norm(); }
    double clip_grad_value() const override { return options().clip_grad_value(); }

private:
    const LomoOptions &options() const;
    void apply(const at::Tensor &param, at::Tensor &p32, const at::Tensor &grad32) override;
};

class AdaLomo final : public LomoOptimizer {
public:
    AdaLomo(std::vector<torch::optim::OptimizerParamGroup> groups, AdaLomoOptions defaults);
    double loss_scale() const override { return options().loss_scale() > 0 ? options().loss_scale() : 1.0; }
    double clip_grad_norm() const override { return options().clip_grad_norm(); }
    double clip_grad_value() const override { return options().clip_grad_value(); }
    void begin_update(double lr, double clip_coef) override;

private:
    const AdaLomoOptions &options() const;
    void apply(const at::Tensor &param, at::Tensor &p32, const at::Tensor &grad32) override;
    int64_t step_ = 0; // lomo_backward calls so far (AdaLomo's step_num); each parameter's state records its own
};

std::unique_ptr<torch::optim::Optimizer> make_lomo_optimizer(const std::vector<at::Tensor> &params,
                                                             const config::OptimizerConfig &c);

// For one backward: a pre-hook on each parameter's gradient accumulator hands the parameter's whole gradient
// (every use summed) to `on_grad` and keeps AccumulateGrad from storing it, so the gradient is freed as soon
// as the hook returns. Parameters outside the graph get none. The destructor removes the hooks.
class GradientHooks {
public:
    GradientHooks(const std::vector<at::Tensor> &params, std::function<void(const at::Tensor &, const at::Tensor &)> on_grad);
    ~GradientHooks();
    GradientHooks(const GradientHooks &) = delete;
    GradientHooks &operator=(const GradientHooks &) = delete;

private:
    struct Installed;
    std::vector<Installed> installed_;
};

} // namespace accel
