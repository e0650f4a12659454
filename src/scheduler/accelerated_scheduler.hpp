// AcceleratedScheduler: a LambdaLR-style schedule over an optimizer that, once prepared, follows
// Accelerate's stepping rules (scheduler.py): nothing while accumulating, nothing after a skipped
// optimizer step, num_processes steps per call unless split_batches.
#pragma once

#include "config/scheduler_config.hpp"
#include "state/state_dict.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel {

class AcceleratedOptimizer;
struct AcceleratorState;

class AcceleratedScheduler {
public:
    AcceleratedScheduler(std::shared_ptr<AcceleratedOptimizer> optimizer, config::SchedulerConfig config);

    void step();
    // Accelerate's DummyScheduler ({"type": "dummy"}): prepare replaces it with hf_ds_config's block (become).
    const config::SchedulerConfig &config() const { return config_; }
    void become(const config::SchedulerConfig &config);
    double last_lr() const { return last_lrs_.at(0); }
    int64_t step_count() const { return last_epoch_; }
    const std::shared_ptr<AcceleratedOptimizer> &optimizer() const { return optimizer_; }
    const std::vector<double> &base_lrs() const { return base_lrs_; }
    const std::vector<double> &last_lrs() const { return last_lrs_; }
    // LambdaLR.state_dict() as PyTorch 1.13 writes it (lr_lambdas: None per group).
    PyRef state_dict() const;
    // LambdaLR.load_state_dict(): checks base_lrs, _last_lr (one per optimizer group) and last_epoch and
    // returns the function that installs them; the optimizer's lr is left as the optimizer's own state
    // restored it.
    ApplyState load_state_dict(const PyObj &state_dict, const std::string &what);

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
