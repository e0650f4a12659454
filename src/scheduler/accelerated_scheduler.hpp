// AcceleratedScheduler: a LambdaLR-style schedule over an optimizer that, once prepared, follows
// Accelerate's stepping rules (scheduler.py): nothing while accumulating, nothing after a skipped
// optimizer step, num_processes steps per call unless split_batches.
#pragma once

#include "config/scheduler_config.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace accel {

class AcceleratedOptimizer;
struct AcceleratorState;

class AcceleratedScheduler {
public:
    AcceleratedScheduler(std::shared_ptr<AcceleratedOptimizer> optimizer, config::SchedulerConfig config);

    void step();
    double last_lr() const { return last_lrs_.at(0); }
    int64_t step_count() const { return last_epoch_; }
    const std::shared_ptr<AcceleratedOptimizer> &optimizer() const { return optimizer_; }
    // LambdaLR.state_dict() pieces, for checkpointing (src/checkpointing/).
    const std::vector<double> &base_lrs() const { return base_lrs_; }
    const std::vector<double> &last_lrs() const { return last_lrs_; }
    // LambdaLR.load_state_dict(): the optimizer's lr is left as the optimizer's own state restored it.
    void restore(std::vector<double> base_lrs, int64_t last_epoch, std::vector<double> last_lrs)
    {
        base_lrs_ = std::move(base_lrs);
        last_epoch_ = last_epoch;
        last_lrs_ = std::move(last_lrs);
    }

    std::shared_ptr<AcceleratorState> prepared_by;

private:
    void advance(); // one step of the underlying schedule
    std::shared_ptr<AcceleratedOptimizer> optimizer_;
    config::SchedulerConfig config_;
    std::vector<double> base_lrs_;
    std::vector<double> last_lrs_;
    int64_t last_epoch_ = -1;
};

} // namespace accel
