// AcceleratedOptimizer: a LibTorch optimizer over a model's parameters that, once prepared, steps
// and clears gradients only on sync steps (Accelerate's optimizer.py).
#pragma once

#include "config/optimizer_config.hpp"
#include "parallel/fsdp/shard_layout.hpp"
#include "state/state_dict.hpp"

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace accel {

class Model;
class OffloadFiles;
class OptimizerOffload;
struct AcceleratorState;

class AcceleratedOptimizer {
public:
    AcceleratedOptimizer(std::shared_ptr<Model> model, const config::OptimizerConfig &config);
    ~AcceleratedOptimizer();

    void step();
    void zero_grad();
    // Accelerate's DummyOptim ({"type": "dummy"}): prepare replaces it with hf_ds_config's optimizer block
    // (become: the same parameters, a fresh optimizer of that config).
    const config::OptimizerConfig &config() const { return config_; }
    void become(const config::OptimizerConfig &config);
    size_t num_param_groups() const;
    double lr(size_t group = 0) const;
    void set_lr(double lr, size_t group);
    // What a PyTorch scheduler does to the optimizer it is built over: each group's "initial_lr" becomes its
    // lr where it has none yet. Carried in state dicts as PyTorch carries it; nothing computes with it.
    void note_initial_lrs();
    double initial_lr(size_t group) const
    {
        return group < initial_lr_.size() && initial_lr_[group] ? *initial_lr_[group] : lr(group);
    }
    bool step_was_skipped() const { return step_was_skipped_; }
    // Every parameter the optimizer updates (all groups), as the gradient scaler unscales them.
    std::vector<at::Tensor> params() const;
    const std::shared_ptr<Model> &model() const { return model_; }
    torch::optim::Optimizer &torch_optimizer() const { return *optimizer_; }

    // Python's Optimizer.state_dict() (PyTorch 1.13 keys; src/optimizer/optimizer_state.cpp). Sharded, it
    // is still one entry per model parameter (gathered from every rank: collective, call it on all).
    PyRef state_dict() const;
    // Checks `state_dict` against this optimizer (types, group and parameter counts, shapes) and schedules
    // the copies of its state tensors through `copy` (into the optimizer's own state tensors where they
    // fit); nothing changes until the returned function runs, after the copies ran. `what` names the
    // file in messages. Sharded, it takes the unsharded form and keeps this rank's shard (no communication).
    ApplyState load_state_dict(const PyObj &state_dict, const std::string &what, const CopyFn &copy);
    // SHARDED_STATE_DICT (sharded only): the per-parameter form with each per-element tensor replaced by
    // this rank's piece, named "state.{parameter}.{key}"; and back, from the whole tensors of such a save
    // (any process count, sharded or not).
    ShardedState sharded_state_dict() const;
    // The trainable parameters' names, group by group, each group in state-dict order (ids counted across
    // the groups): what DeepSpeed's layout records as param_shapes.
    std::vector<std::vector<std::string>> param_names_by_group() const;
    // A tensor name of sharded_state_dict(), "state.{parameter}.{key}", as (parameter, key); DATA_LOSS naming
    // `what` otherwise.
    static std::pair<int64_t, std::string> state_tensor_name(const std::string &name, const std::string &what);
    ApplyState load_sharded_state_dict(const PyObj &rest, const ShardedSource &src, const std::string &what,
                                       const CopyFn &copy);

    std::shared_ptr<AcceleratorState> prepared_by;

    // Sharded training (src/parallel/fsdp): the optimizer is rebuilt over the engine's flat shards (same
    // type, options and current learning rate); after_step runs after every inner step that ran,
    // after_zero_grad after every zero_grad that acted; `layout` maps the shards onto the parameters.
    void shard_over(const std::vector<at::Tensor> &shards, parallel::ShardLayout layout, std::function<void()> after_step,
                    std::function<void()> after_zero_grad, std::function<void()> before_step);
    bool is_sharded() const { return static_cast<bool>(layout_); }
    // Not sharded: what runs inside every step that acts, after the scaler's unscaling and before the inner step
    // (Megatron-LM's gradient_clipping); null for nothing. shard_over sets its own.
    void set_before_step(std::function<void()> before_step) { before_step_ = std::move(before_step); }
    // free_memory, in two parts: the state joined from every rank's shard, in the unsharded layout
    // (collective; null when not sharded), taken while the engine still shards the model; then, once the
    // model's parameters are whole again (and back in their own dtype), one LibTorch optimizer over them
    // with that state.
    PyRef unsharded_state() const;
    void unshard(const PyRef &state);

    // Optimizer offload (optimizer_offload.hpp; sharded only): `device` "cpu", or "nvme" with its files.
    void offload(const std::string &device, std::unique_ptr<OffloadFiles> files);
    // State bytes in memory now; kept outside it by offload; the most in memory at once (offload "nvme":
    // during steps; else the bytes now).
    int64_t state_bytes() const;
    int64_t offloaded_bytes() const;
    int64_t peak_state_bytes() const;
    // A parameter's state tensors in its optimizer type's order (undefined where it has none; empty when it
    // has no state yet), and putting such a list back (offloading).
    std::vector<at::Tensor> state_tensors(const at::Tensor &param) const;
    void set_state_tensors(const at::Tensor &param, const std::vector<at::Tensor> &tensors);
    // A parameter's whole state, to move it between processes (pipeline checkpoints): its step count as an int64
    // scalar (undefined for types without one), then state_tensors(); empty when it has none. set_param_state
    // makes that state anew (whether or not the parameter had some); an empty list drops it.
    std::vector<at::Tensor> param_state(const at::Tensor &param) const;
    void set_param_state(const at::Tensor &param, const std::vector<at::Tensor> &state);
    // State made while the parameters were elsewhere joins each parameter's device (Accelerate's
    // AcceleratedOptimizer moves it with device_placement); done before the first step after a move.
    void move_state_to_parameters();

private:
    // Sharded with several parameter groups or with a sub_group_size below a shard, the LibTorch optimizer
    // steps pieces of the shards, each within one group: runs_[i] is its i-th parameter (in group order), a
    // piece of shards_[unit].
    struct ShardRun {
        size_t unit;
        int64_t start, numel;
        size_t group;
    };
    std::vector<ShardRun> runs_;
    std::vector<at::Tensor> shards_;
    // Per trainable parameter (named_parameters() order): its group, and its index in a state dict.
    std::vector<size_t> param_group_;
    std::vector<int64_t> state_id_;
    std::vector<std::vector<at::Tensor>> grouped(const std::vector<at::Tensor> &params) const;
    void attach_run_grads(); // each run's gradient: its piece of the shard's
    std::function<std::function<void()>(size_t, bool)> page_fn() const; // parameter offload's paging, by optimizer parameter
    PyRef joined_state(const PyRef &inner) const;    // the runs' state joined per unit (the shard form)
    config::OptimizerConfig config_;
    std::vector<std::optional<double>> initial_lr_; // per group of the LibTorch optimizer (note_initial_lrs)
    std::function<void()> after_step_, after_zero_grad_, before_step_;
    std::shared_ptr<const parallel::ShardLayout> layout_; // set while sharded
    // Optimizer.state_dict() / load_state_dict of the LibTorch optimizer as it is (over the shards when sharded).
    // (With "nvme" offload, every shard's state is brought into memory for them, and out again after.)
    PyRef inner_state_dict() const;
    PyRef resident_state_dict() const;
    ApplyState resident_load_state_dict(const PyObj &state_dict, const std::string &what, const CopyFn &copy);
    void step_now(); // step() without the profiler's range and schedule step
    void inner_step();
    PyRef unsharded_form(const PyObj &inner, const std::vector<PyRef> &per_param) const;
    ApplyState load_shard_form(const PyObj &sd, const ShardedSource *src, const std::string &what, const CopyFn &copy);
    ApplyState inner_load_state_dict(const PyObj &state_dict, const std::string &what, const CopyFn &copy);
    bool may_act() const; // false while accumulating gradients
    std::shared_ptr<Model> model_;
    std::shared_ptr<void> holds_model_; // Model::hold_parameters(): what trains stays as it was when built
    uint64_t placement_seen_ = 0; // model_->placement() when the state last followed the parameters
    std::unique_ptr<torch::optim::Optimizer> optimizer_;
    std::unique_ptr<OptimizerOffload> offload_; // after optimizer_: destroyed first
    bool step_was_skipped_ = false;
};

} // namespace accel
