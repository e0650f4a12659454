#include "optimizer/accelerated_optimizer.hpp"

#include "common/error.hpp"
#include "common/offload_files.hpp"
#include "model/model.hpp"
#include "optimizer/optimizer_offload.hpp"
#include "precision/grad_scaler.hpp"
#include "state/accelerator_state.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>

namespace accel {

namespace {
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor> &params,
                                                        const config::OptimizerConfig &c)
{
    namespace optim = torch::optim;
    if (c.type == "sgd")
        return std::make_unique<optim::SGD>(params, optim::SGDOptions(c.lr)
                                                        .momentum(c.momentum)
                                                        .dampening(c.dampening)
                                                        .nesterov(c.nesterov)
                                                        .weight_decay(c.weight_decay));
    if (c.type == "adam")
        return std::make_unique<optim::Adam>(params, optim::AdamOptions(c.lr)
                                                         .betas({c.beta1, c.beta2})
                                                         .eps(c.eps)
                                                         .weight_decay(c.weight_decay)
                                                         .amsgrad(c.amsgrad));
    if (c.type == "adamw")
        return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(c.lr)
                                                          .betas({c.beta1, c.beta2})
                                                          .eps(c.eps)
                                                          .weight_decay(c.weight_decay)
                                                          .amsgrad(c.amsgrad));
    if (c.type == "adagrad")
        return std::make_unique<optim::Adagrad>(params, optim::AdagradOptions(c.lr)
                                                            .lr_decay(c.lr_decay)
                                                            .weight_decay(c.weight_decay)
                                                            .initial_accumulator_value(c.initial_accumulator_value)
                                                            .eps(c.eps));
    if (c.type == "rmsprop")
        return std::make_unique<optim::RMSprop>(params, optim::RMSpropOptions(c.lr)
                                                            .alpha(c.alpha)
                                                            .eps(c.eps)
                                                            .weight_decay(c.weight_decay)
                                                            .momentum(c.momentum)
                                                            .centered(c.centered));
    fail(ACCEL_ERR_INTERNAL, "unhandled optimizer type " + c.type);
}
} // namespace

AcceleratedOptimizer::AcceleratedOptimizer(std::shared_ptr<Model> model, const config::OptimizerConfig &config)
    : config_(config), model_(std::move(model))
{
    std::vector<at::Tensor> params;
    for (const auto &p : model_->parameters())
        if (p.requires_grad()) params.push_back(p);
    if (params.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "model: has no trainable parameters to optimize");
    optimizer_ = make_optimizer(params, config);
}

AcceleratedOptimizer::~AcceleratedOptimizer() = default;

bool AcceleratedOptimizer::may_act() const { return prepared_by == nullptr || prepared_by->gradient.sync_gradients(); }

void AcceleratedOptimizer::step()
{
    if (!may_act()) return;
    GradScaler *scaler = prepared_by ? prepared_by->scaler.get() : nullptr;
    if (scaler == nullptr || !scaler->is_enabled()) {
        step_was_skipped_ = false;
        if (before_step_) before_step_();
        inner_step();
        if (after_step_) after_step_();
        return;
    }
    // Accelerate: scaler.step(optimizer) (unscales unless clipping already did, skips the step on
    // inf/NaN), then scaler.update(); the step was skipped if the inner step never ran. What runs inside
    // the step (DeepSpeed's clipping) sees the unscaled gradients of a step that is taken.
    const bool stepped = scaler->step(this, params(), [this] {
        if (before_step_) before_step_();
        inner_step();
        if (after_step_) after_step_();
    });
    scaler->update();
    step_was_skipped_ = !stepped;
}

void AcceleratedOptimizer::inner_step()
{
    // The model moved since the last step (prepare's device placement): state made before (Adagrad makes
    // it in its constructor; a step or a load before prepare) follows the parameters.
    if (model_ && model_->placement() != placement_seen_) {
        move_state_to_parameters();
        placement_seen_ = model_->placement();
    }
    auto step = [this] { optimizer_->step(); };
    const PageFn page = layout_ ? layout_->page : nullptr;
    if (offload_) offload_->step(step, page);
    else if (page) step_each_shard(params(), step, page); // parameter offload: a few shards in memory at a time
    else step();
}

PyRef AcceleratedOptimizer::inner_state_dict() const
{
    if (!offload_) return resident_state_dict();
    offload_->page_in_all();
    PyRef sd = resident_state_dict(); // holds the tensors: paging out leaves new empty ones in the optimizer
    offload_->page_out_all(/*changed=*/false);
    return sd;
}

ApplyState AcceleratedOptimizer::inner_load_state_dict(const PyObj &state_dict, const std::string &what,
                                                       const CopyFn &copy)
{
    if (!offload_) return resident_load_state_dict(state_dict, what, copy);
    offload_->page_in_all(); // the loaded state is copied into the state tensors themselves
    ApplyState apply = resident_load_state_dict(state_dict, what, copy);
    return [this, apply = std::move(apply)] {
        apply();
        offload_->page_out_all(/*changed=*/true);
    };
}

void AcceleratedOptimizer::offload(const std::string &device, std::unique_ptr<OffloadFiles> files)
{
    if (!layout_) fail(ACCEL_ERR_INTERNAL, "optimizer: only a sharded optimizer is offloaded");
    offload_ = std::make_unique<OptimizerOffload>(*this, device, std::move(files));
    offload_->page_out_all(/*changed=*/true); // state from before (a step before prepare, a load) goes out now
}

int64_t AcceleratedOptimizer::offloaded_bytes() const { return offload_ ? offload_->offloaded_bytes() : 0; }

int64_t AcceleratedOptimizer::peak_state_bytes() const
{
    return offload_ && offload_->device() == "nvme" ? std::max(offload_->peak_resident_bytes(), state_bytes()) : state_bytes();
}

std::vector<at::Tensor> AcceleratedOptimizer::params() const
{
    std::vector<at::Tensor> out;
    for (const auto &group : optimizer_->param_groups())
        for (const auto &p : group.params()) out.push_back(p);
    return out;
}

void AcceleratedOptimizer::zero_grad()
{
    if (!may_act()) return;
    // set_to_none=True, Accelerate's default: the next backward writes fresh gradients.
    for (auto &group : optimizer_->param_groups())
        for (auto &p : group.params()) p.mutable_grad().reset();
    if (after_zero_grad_) after_zero_grad_();
}

namespace {
void copy_now(const at::Tensor &dst, const at::Tensor &src) { dst.copy_(src); }
} // namespace

void AcceleratedOptimizer::shard_over(const std::vector<at::Tensor> &shards, parallel::ShardLayout layout,
                                      std::function<void()> after_step,
                                      std::function<void()> after_zero_grad, std::function<void()> before_step)
{
    if (optimizer_->param_groups().size() != 1)
        fail(ACCEL_ERR_UNIMPLEMENTED, "optimizer: sharding supports one parameter group");
    // State it already has (steps taken before prepare, or before a free_memory) moves into the shards.
    PyRef state = inner_state_dict();
    auto options = optimizer_->param_groups()[0].options().clone();
    auto rebuilt = make_optimizer(shards, config_);
    rebuilt->param_groups()[0].set_options(std::move(options)); // the current learning rate and the rest
    optimizer_ = std::move(rebuilt);
    after_step_ = std::move(after_step);
    after_zero_grad_ = std::move(after_zero_grad);
    before_step_ = std::move(before_step);
    layout_ = std::make_shared<const parallel::ShardLayout>(std::move(layout));
    if (!state->get("state")->map.empty()) load_state_dict(*state, "optimizer", copy_now)();
}

PyRef AcceleratedOptimizer::unsharded_state() const
{
    return layout_ ? state_dict() : PyRef(); // collective: one entry per parameter
}

void AcceleratedOptimizer::unshard(const PyRef &state)
{
    if (!layout_) return;
    if (!state) fail(ACCEL_ERR_INTERNAL, "optimizer: unshard without its state");
    std::vector<at::Tensor> params;
    for (const auto &p : model_->parameters())
        if (p.requires_grad()) params.push_back(p);
    auto options = optimizer_->param_groups()[0].options().clone();
    auto rebuilt = make_optimizer(params, config_);
    rebuilt->param_groups()[0].set_options(std::move(options));
    offload_.reset(); // its files go; the state is in `state`
    optimizer_ = std::move(rebuilt);
    layout_.reset();
    after_step_ = after_zero_grad_ = before_step_ = nullptr;
    inner_load_state_dict(*state, "optimizer", copy_now)();
}

size_t AcceleratedOptimizer::num_param_groups() const { return optimizer_->param_groups().size(); }

double AcceleratedOptimizer::lr(size_t group) const { return optimizer_->param_groups().at(group).options().get_lr(); }

void AcceleratedOptimizer::set_lr(double lr, size_t group) { optimizer_->param_groups().at(group).options().set_lr(lr); }

} // namespace accel
