#include "optimizer/accelerated_optimizer.hpp"

#include "common/error.hpp"
#include "common/offload_files.hpp"
#include "model/model.hpp"
#include "optimizer/lomo.hpp"
#include "optimizer/optimizer_offload.hpp"
#include "parallel/fsdp/storage.hpp"
#include "precision/grad_scaler.hpp"
#include "state/accelerator_state.hpp"
#include "profiling/profile_session.hpp"
#include "profiling/ranges.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>

namespace accel {

namespace {

namespace optim = torch::optim;

// The hyperparameters of group `g` (the top level's without param_groups).
const config::OptimizerConfig &group_options(const config::OptimizerConfig &c, size_t g)
{
    return c.param_groups.empty() ? c : c.param_groups.at(g).options;
}

template <class Options> Options options_of(const config::OptimizerConfig &c);
template <> optim::SGDOptions options_of(const config::OptimizerConfig &c)
{
    return optim::SGDOptions(c.lr).momentum(c.momentum).dampening(c.dampening).nesterov(c.nesterov).weight_decay(c.weight_decay);
}
template <> optim::AdamOptions options_of(const config::OptimizerConfig &c)
{
    return optim::AdamOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay).amsgrad(c.amsgrad);
}
template <> optim::AdamWOptions options_of(const config::OptimizerConfig &c)
{
    return optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay).amsgrad(c.amsgrad);
}
template <> optim::AdagradOptions options_of(const config::OptimizerConfig &c)
{
    return optim::AdagradOptions(c.lr)
        .lr_decay(c.lr_decay)
        .weight_decay(c.weight_decay)
        .initial_accumulator_value(c.initial_accumulator_value)
        .eps(c.eps);
}
template <> optim::RMSpropOptions options_of(const config::OptimizerConfig &c)
{
    return optim::RMSpropOptions(c.lr).alpha(c.alpha).eps(c.eps).weight_decay(c.weight_decay).momentum(c.momentum).centered(
        c.centered);
}

template <class Opt, class Options>
std::unique_ptr<optim::Optimizer> build(const std::vector<std::vector<at::Tensor>> &groups, const config::OptimizerConfig &c)
{
    std::vector<optim::OptimizerParamGroup> pg;
    for (size_t g = 0; g < groups.size(); ++g)
        pg.emplace_back(groups[g], std::make_unique<Options>(options_of<Options>(group_options(c, g))));
    return std::make_unique<Opt>(std::move(pg), options_of<Options>(c));
}

// A LibTorch optimizer of c.type over `groups` (one per config group, or one of every parameter).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<std::vector<at::Tensor>> &groups,
                                                        const config::OptimizerConfig &c)
{
    // "dummy" (Accelerate's DummyOptim) only holds its lr until prepare replaces it: an SGD that never steps.
    if (c.type == "sgd" || c.type == "dummy") return build<optim::SGD, optim::SGDOptions>(groups, c);
    if (c.type == "adam") return build<optim::Adam, optim::AdamOptions>(groups, c);
    if (c.type == "adamw") return build<optim::AdamW, optim::AdamWOptions>(groups, c);
    if (c.type == "adagrad") return build<optim::Adagrad, optim::AdagradOptions>(groups, c);
    if (c.type == "rmsprop") return build<optim::RMSprop, optim::RMSpropOptions>(groups, c);
    if (c.type == "lomo" || c.type == "adalomo") return make_lomo_optimizer(groups.at(0), c); // one group (config)
    fail(ACCEL_ERR_INTERNAL, "unhandled optimizer type " + c.type);
}

std::vector<std::unique_ptr<optim::OptimizerOptions>> options_of_groups(optim::Optimizer &o)
{
    std::vector<std::unique_ptr<optim::OptimizerOptions>> out;
    for (auto &group : o.param_groups()) out.push_back(group.options().clone());
    return out;
}

// A rebuilt optimizer takes over the hyperparameters as they are (the current learning rate and the rest).
void set_options_of_groups(optim::Optimizer &o, std::vector<std::unique_ptr<optim::OptimizerOptions>> options)
{
    for (size_t g = 0; g < options.size(); ++g) o.param_groups()[g].set_options(std::move(options[g]));
}

} // namespace

AcceleratedOptimizer::AcceleratedOptimizer(std::shared_ptr<Model> model, const config::OptimizerConfig &config)
    : config_(config), model_(std::move(model)), holds_model_(model_->hold_parameters())
{
    std::vector<std::string> names;
    std::vector<at::Tensor> params;
    for (const auto &[name, p] : model_->named_parameters())
        if (p.requires_grad()) names.push_back(name), params.push_back(p);
    if (params.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "model: has no trainable parameters to optimize");
    param_group_ = config::assign_param_groups(config, names);
    // PyTorch numbers the parameters of a state dict group by group.
    state_id_.resize(params.size());
    int64_t next = 0;
    for (size_t g = 0; g < std::max<size_t>(1, config.param_groups.size()); ++g)
        for (size_t i = 0; i < params.size(); ++i)
            if (param_group_[i] == g) state_id_[i] = next++;
    optimizer_ = make_optimizer(grouped(params), config);
}

std::vector<std::vector<at::Tensor>> AcceleratedOptimizer::grouped(const std::vector<at::Tensor> &params) const
{
    std::vector<std::vector<at::Tensor>> out(std::max<size_t>(1, config_.param_groups.size()));
    for (size_t i = 0; i < params.size(); ++i) out.at(param_group_.at(i)).push_back(params[i]);
    return out;
}

AcceleratedOptimizer::~AcceleratedOptimizer() = default;

std::vector<std::vector<std::string>> AcceleratedOptimizer::param_names_by_group() const
{
    std::vector<std::vector<std::string>> out(std::max<size_t>(1, config_.param_groups.size()));
    size_t i = 0;
    for (const auto &[name, p] : model_->named_parameters())
        if (p.requires_grad()) out.at(param_group_.at(i++)).push_back(name); // ids run in this order within a group
    return out;
}

bool AcceleratedOptimizer::may_act() const { return prepared_by == nullptr || prepared_by->gradient.sync_gradients(); }

void AcceleratedOptimizer::become(const config::OptimizerConfig &config)
{
    if (layout_) fail(ACCEL_ERR_INTERNAL, "optimizer: replaced after it was sharded");
    std::vector<at::Tensor> params;
    for (const auto &p : model_->parameters())
        if (p.requires_grad()) params.push_back(p);
    optimizer_ = make_optimizer(grouped(params), config);
    config_ = config;
}

void AcceleratedOptimizer::step()
{
    {
        profiling::Range range(profiling::kOptimizerStep);
        step_now();
    }
    // accelerator.profile(): this step is one prof.step() of its schedule.
    if (prepared_by && prepared_by->profile) prepared_by->profile->step(this);
}

void AcceleratedOptimizer::step_now()
{
    if (config_.type == "dummy")
        fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: a dummy optimizer (Accelerate's DummyOptim) steps only once "
                                            "prepared under deepspeed_plugin with an hf_ds_config optimizer block");
    if (dynamic_cast<LomoOptimizer *>(optimizer_.get())) optimizer_->step(); // fails, naming lomo_backward
    if (!may_act()) return;
    attach_run_grads(); // the gradient scaler unscales them
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
    attach_run_grads(); // again: what ran before the step (DeepSpeed's clipping) may have replaced them
    auto step = [this] { optimizer_->step(); };
    const PageFn page = page_fn();
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
    // lomo_optim updates ZeRO-3 partitions with gradients all-reduced whole in its hook; accel's engines
    // reduce-scatter flat units after backward, which a fused update cannot wait for.
    if (dynamic_cast<LomoOptimizer *>(optimizer_.get()))
        fail(ACCEL_ERR_UNIMPLEMENTED, "optimizer: type \"" + config_.type + "\" under fsdp_plugin / deepspeed_plugin "
                                      "(sharded parameters) is not supported: LOMO's fused update needs each whole "
                                      "gradient during backward");
    const size_t num_groups = optimizer_->param_groups().size();
    if (layout.params.size() != param_group_.size())
        fail(ACCEL_ERR_INTERNAL, "optimizer: the sharded layout has another parameter count than the optimizer");
    const int64_t sub = layout.sub_group_numel;
    const bool cut = num_groups > 1 || (sub > 0 && *std::max_element(layout.shard_numel.begin(), layout.shard_numel.end()) > sub);
    // Parameter offload pages whole shards around their pieces' steps: those must follow each other (one group).
    if (cut && num_groups > 1 && layout.page)
        fail(ACCEL_ERR_UNIMPLEMENTED, "optimizer: param_groups with parameter offload to nvme is not supported yet");
    // State it already has (steps taken before prepare, or before a free_memory) moves into the shards.
    PyRef state = inner_state_dict();
    auto options = options_of_groups(*optimizer_);
    std::vector<std::vector<at::Tensor>> groups(num_groups);
    runs_.clear();
    if (!cut) {
        groups[0] = shards;
    } else {
        // Each shard cut where the group changes, and into sub-groups of at most `sub` elements (DeepSpeed's
        // sub_group_size): the LibTorch optimizer steps these pieces, group by group (its updates are
        // elementwise, so stepping pieces equals stepping the shard; with optimizer offload one piece's state
        // is in memory at a time). Padding after a parameter goes with it: zeros with zero gradients stay zeros.
        std::vector<std::vector<ShardRun>> by_group(num_groups);
        const int64_t rank = layout.shard_rank;
        for (size_t u = 0; u < layout.unit_params.size(); ++u) {
            const int64_t lo = rank * layout.shard_numel[u], hi = lo + layout.shard_numel[u];
            std::vector<ShardRun> runs; // in shard order; parameters lie back to back, padding at the end
            for (size_t k : layout.unit_params[u]) {
                const int64_t begin = std::max<int64_t>(layout.param_offset[k] - lo, 0);
                const int64_t end = std::min(layout.param_offset[k] + layout.params[k].numel(), hi) - lo;
                if (end <= begin) continue; // none of it on this rank
                if (runs.empty()) {
                    runs.push_back({u, 0, 0, param_group_[k]});
                } else if (runs.back().group != param_group_[k]) {
                    runs.back().numel = begin - runs.back().start;
                    runs.push_back({u, begin, 0, param_group_[k]});
                }
            }
            if (runs.empty()) runs.push_back({u, 0, 0, param_group_[layout.unit_params[u].front()]}); // padding only
            runs.back().numel = layout.shard_numel[u] - runs.back().start;
            for (const ShardRun &r : runs)
                for (int64_t at = 0; at < r.numel; at += sub > 0 ? sub : r.numel)
                    by_group[r.group].push_back({u, r.start + at, sub > 0 ? std::min(sub, r.numel - at) : r.numel, r.group});
        }
        at::NoGradGuard no_grad;
        for (size_t g = 0; g < num_groups; ++g)
            for (const ShardRun &r : by_group[g]) {
                groups[g].push_back(parallel::piece_of(shards[r.unit].detach(), r.start, r.numel)); // (may be paged out now)
                runs_.push_back(r);
            }
    }
    auto rebuilt = make_optimizer(groups, config_);
    set_options_of_groups(*rebuilt, std::move(options));
    optimizer_ = std::move(rebuilt);
    shards_ = shards;
    after_step_ = std::move(after_step);
    after_zero_grad_ = std::move(after_zero_grad);
    before_step_ = std::move(before_step);
    layout_ = std::make_shared<const parallel::ShardLayout>(std::move(layout));
    if (!state->get("state")->map.empty()) load_state_dict(*state, "optimizer", copy_now)();
}

PageFn AcceleratedOptimizer::page_fn() const
{
    if (!layout_ || !layout_->page || runs_.empty()) return layout_ ? layout_->page : nullptr;
    // Pieces of one shard follow each other (shard_over): the shard comes into memory before its first piece
    // steps and goes out after its last.
    return [page = layout_->page, runs = runs_](size_t i, bool in) -> std::function<void()> {
        const size_t u = runs.at(i).unit;
        const bool edge = in ? i == 0 || runs[i - 1].unit != u : i + 1 == runs.size() || runs[i + 1].unit != u;
        if (!edge) return [] {};
        return page(u, in);
    };
}

void AcceleratedOptimizer::attach_run_grads()
{
    if (runs_.empty()) return;
    size_t i = 0;
    for (auto &group : optimizer_->param_groups())
        for (auto &p : group.params()) {
            const ShardRun &r = runs_.at(i++);
            const at::Tensor &g = shards_.at(r.unit).grad();
            if (g.defined()) p.mutable_grad() = g.narrow(0, r.start, r.numel);
            else p.mutable_grad().reset();
        }
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
    auto options = options_of_groups(*optimizer_);
    auto rebuilt = make_optimizer(grouped(params), config_);
    set_options_of_groups(*rebuilt, std::move(options));
    offload_.reset(); // its files go; the state is in `state`
    optimizer_ = std::move(rebuilt);
    layout_.reset();
    runs_.clear();
    shards_.clear();
    after_step_ = after_zero_grad_ = before_step_ = nullptr;
    inner_load_state_dict(*state, "optimizer", copy_now)();
}

size_t AcceleratedOptimizer::num_param_groups() const { return optimizer_->param_groups().size(); }

double AcceleratedOptimizer::lr(size_t group) const { return optimizer_->param_groups().at(group).options().get_lr(); }

void AcceleratedOptimizer::set_lr(double lr, size_t group) { optimizer_->param_groups().at(group).options().set_lr(lr); }

void AcceleratedOptimizer::note_initial_lrs()
{
    initial_lr_.resize(num_param_groups());
    for (size_t g = 0; g < initial_lr_.size(); ++g)
        if (!initial_lr_[g]) initial_lr_[g] = lr(g);
}

} // namespace accel
