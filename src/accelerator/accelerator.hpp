// Accelerator: composes the state, precision, optimizer, scheduler and data-loader pieces into
// Accelerate's training loop (accelerator.py). It owns little logic of its own.
#pragma once

#include "ops/loss.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace accel {

class Model;
class AcceleratedOptimizer;
class AcceleratedScheduler;
class DataLoaderShard;
struct Batch;

class Accelerator {
public:
    explicit Accelerator(const char *config_json);

    const std::shared_ptr<AcceleratorState> &state() const { return state_; }
    const config::AcceleratorConfig &config() const { return state_->config; }

    void prepare_model(Model &model);
    void prepare_optimizer(const std::shared_ptr<AcceleratedOptimizer> &optimizer);
    void prepare_dataloader(DataLoaderShard &loader);
    void prepare_scheduler(AcceleratedScheduler &scheduler);

    void backward(const at::Tensor &loss);
    void accumulate_begin();
    void accumulate_end();
    double clip_grad_norm(Model &model, double max_norm, double norm_type);
    void clip_grad_value(Model &model, double clip_value);
    bool optimizer_step_was_skipped() const;

    // forward, loss, backward, optimizer/scheduler step and zero_grad inside accumulate(); returns the loss.
    double train_step(Model &model, AcceleratedOptimizer &optimizer, AcceleratedScheduler *scheduler,
                      const Batch &batch, LossKind loss);

private:
    void check_owner(const std::shared_ptr<AcceleratorState> &owner, const char *what) const;
    std::shared_ptr<AcceleratorState> state_;
    std::vector<std::shared_ptr<AcceleratedOptimizer>> optimizers_;
};

} // namespace accel
