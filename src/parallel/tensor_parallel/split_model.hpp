// What a model with a tensor-parallel plan offers (GptModel, LlamaModel), so that prepare (plan.hpp) and the
// checkpoint gathering (whole_state.hpp) work for any of them without knowing the model type.
#pragma once

#include "config/tp_plan_config.hpp"
#include "parallel/tensor_parallel/slicing.hpp"

#include <map>
#include <memory>
#include <string>
#include <utility>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::tp {

class DropoutGenerator;

class TensorParallelModel {
public:
    virtual ~TensorParallelModel() = default;
    // Narrows each planned parameter in place to this rank's slice of `group` and swaps the linears for their
    // parallel forms; INVALID_ARGUMENT naming a size that does not divide by the group's.
    virtual void apply_tensor_parallel(const std::shared_ptr<distributed::Communicator> &group) = 0;
    // How each parameter (by name) is split: empty without tensor parallelism (or at tp 1).
    virtual const std::map<std::string, ParameterSlicing> &tensor_parallel_slicing() const = 0;
    virtual const std::shared_ptr<distributed::Communicator> &tensor_parallel_group() const = 0;
    // This rank's generator for dropout in the split regions (rng_tracker.hpp), which checkpoints keep; null when
    // the model draws none.
    virtual std::shared_ptr<DropoutGenerator> tensor_parallel_dropout() const { return nullptr; }
    // tp_handler.sequence_parallel, before apply_tensor_parallel (plan.cpp; the gpt and llama have their own
    // set_sequence_parallel). UNIMPLEMENTED naming the key for a model that cannot split its positions.
    virtual void enable_sequence_parallel();

    // The spec's tp_plan / base_model_tp_plan overrides (tp_plan.hpp), which apply_tensor_parallel maps onto the
    // model's plan.
    void set_tp_plan(config::TpPlan plan) { tp_plan_ = std::move(plan); }
    const config::TpPlan &tp_plan() const { return tp_plan_; }

private:
    config::TpPlan tp_plan_;
};

} // namespace accel::parallel::tp
