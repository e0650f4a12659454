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
