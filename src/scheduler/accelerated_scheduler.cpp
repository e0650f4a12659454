#include "scheduler/accelerated_scheduler.hpp"

#include "common/error.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "scheduler/schedules.hpp"
#include "state/accelerator_state.hpp"

namespace accel {

AcceleratedScheduler::AcceleratedScheduler(std::shared_ptr<AcceleratedOptimizer> optimizer,
                                           config::SchedulerConfig config)
    : optimizer_(std::move(optimizer)), config_(std::move(config))
{
    // As PyTorch's: each group's "initial_lr" (its lr when the first scheduler was built over it) is the base.
    for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) {
        double lr = optimizer_->initial_lr(g);
        if (config_.type == "polynomial" && !(lr > config_.lr_end))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "lr_end: must be smaller than the optimizer's lr (" + std::to_string(lr) +
                                                 "), got " + std::to_string(config_.lr_end));
        if (config_.type == "polynomial" && lr == 0.0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "optimizer: a polynomial schedule needs an lr > 0");
        base_lrs_.push_back(lr);
    }
    optimizer_->note_initial_lrs();
    // PyTorch's schedulers take their first step on construction: the lr for step 0 is set now.
    advance();
}

void AcceleratedScheduler::advance()
{
    ++last_epoch_;
    last_lrs_.resize(base_lrs_.size());
    for (size_t g = 0; g < base_lrs_.size(); ++g) {
        last_lrs_[g] = scheduled_lr(config_, last_epoch_, base_lrs_[g]);
        optimizer_->set_lr(last_lrs_[g], g);
    }
}

void AcceleratedScheduler::become(const config::SchedulerConfig &config)
{
    config_ = config;
    for (size_t g = 0; g < base_lrs_.size(); ++g) base_lrs_[g] = optimizer_->lr(g);
    // DeepSpeed's schedules set the learning rate of iteration -1 when built; the engine's first step makes it 0.
    last_epoch_ = -2;
    advance();
}

void AcceleratedScheduler::step()
{
    if (config_.type == "dummy")
        fail(ACCEL_ERR_FAILED_PRECONDITION, "scheduler: a dummy scheduler (Accelerate's DummyScheduler) steps only once "
                                            "prepared under deepspeed_plugin with an hf_ds_config scheduler block");
    const AcceleratorState *s = prepared_by.get();
    if (s == nullptr || !s->config.step_scheduler_with_optimizer) {
        advance();
        return;
    }
    if (!s->gradient.sync_gradients()) return;  // accumulating: the optimizer did not step either
    if (optimizer_->step_was_skipped()) return;  // the scaler skipped the optimizer step
    // A schedule is written for one process; each optimizer step consumed num_processes batches. DeepSpeed's
    // engine steps its own schedules once per optimizer step.
    const int32_t times = s->config.dataloader.split_batches || config_.deepspeed() ? 1 : s->num_processes();
    for (int32_t i = 0; i < times; ++i) advance();
}

PyRef AcceleratedScheduler::state_dict() const
{
    auto lrs = [](const std::vector<double> &v) {
        auto l = py_list();
        for (double x : v) l->items.push_back(py_float(x));
        return l;
    };
    auto d = py_dict();
    py_set(*d, "base_lrs", lrs(base_lrs_));
    py_set(*d, "last_epoch", py_int(last_epoch_));
    py_set(*d, "verbose", py_bool(false));
    py_set(*d, "_step_count", py_int(last_epoch_ + 1));
    py_set(*d, "_get_lr_called_within_step", py_bool(false));
    py_set(*d, "_last_lr", lrs(last_lrs_));
    auto lambdas = py_list();
    for (size_t i = 0; i < base_lrs_.size(); ++i) lambdas->items.push_back(py_none());
    py_set(*d, "lr_lambdas", lambdas);
    return d;
}

ApplyState AcceleratedScheduler::load_state_dict(const PyObj &d, const std::string &what)
{
    if (!d.is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
    const size_t groups = base_lrs_.size();
    auto base = sd_numbers(d, "base_lrs", what, groups);
    auto last = sd_numbers(d, "_last_lr", what, groups);
    int64_t epoch = sd_int(d, "last_epoch", what);
    return [this, base = std::move(base), last = std::move(last), epoch] {
        base_lrs_ = base;
        last_lrs_ = last;
        last_epoch_ = epoch;
    };
}

} // namespace accel
