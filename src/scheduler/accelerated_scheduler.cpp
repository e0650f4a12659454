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
    for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) {
        double lr = optimizer_->lr(g);
        if (config_.type == "polynomial" && !(lr > config_.lr_end))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "lr_end: must be smaller than the optimizer's lr (" + std::to_string(lr) +
                                                 "), got " + std::to_string(config_.lr_end));
        if (config_.type == "polynomial" && lr == 0.0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "optimizer: a polynomial schedule needs an lr > 0");
        base_lrs_.push_back(lr);
    }
    // PyTorch's schedulers take their first step on construction: the lr for step 0 is set now.
    advance();
}

void AcceleratedScheduler::advance()
{
    ++last_epoch_;
    last_lrs_.resize(base_lrs_.size());
    for (size_t g = 0; g < base_lrs_.size(); ++g) {
        last_lrs_[g] = base_lrs_[g] * lr_multiplier(config_, last_epoch_, base_lrs_[g]);
        optimizer_->set_lr(last_lrs_[g], g);
    }
}

void AcceleratedScheduler::step()
{
    const AcceleratorState *s = prepared_by.get();
    if (s == nullptr || !s->config.step_scheduler_with_optimizer) {
        advance();
        return;
    }
    if (!s->gradient.sync_gradients()) return;  // accumulating: the optimizer did not step either
    if (optimizer_->step_was_skipped()) return;  // the scaler skipped the optimizer step
    // A schedule is written for one process; each optimizer step consumed num_processes batches.
    const int32_t times = s->config.dataloader.split_batches ? 1 : s->num_processes();
    for (int32_t i = 0; i < times; ++i) advance();
}

} // namespace accel
