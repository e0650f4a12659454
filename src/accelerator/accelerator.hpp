// Accelerator: composes the state, precision, optimizer, scheduler and data-loader pieces into
// Accelerate's training loop (accelerator.py). It owns little logic of its own.
#pragma once

#include "config/checkpoint_options.hpp"
#include "model/load_report.hpp"
#include "ops/loss.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel {

class Model;
class AcceleratedOptimizer;
class AcceleratedScheduler;
class DataLoaderShard;
struct Batch;

class GradScaler;
class AutocastScope;

// An object registered with register_for_checkpointing: saved as custom_checkpoint_{i}.pkl.
struct CheckpointObject {
    std::function<std::string()> save;             // the bytes to store
    std::function<void(const std::string &)> load; // receives the stored bytes
    std::shared_ptr<std::string> blob;             // registered as bytes (else null: callbacks)
};
namespace parallel {
class ParallelWrapper;
class ShardedDataParallel;
}
namespace tracking {
class Trackers;
}
namespace ckpt {
class AsyncCheckpoint;
struct CheckpointFile;
}

class Accelerator {
public:
    explicit Accelerator(const char *config_json);
    ~Accelerator();

    const std::shared_ptr<AcceleratorState> &state() const { return state_; }
    const config::AcceleratorConfig &config() const { return state_->config; }

    void prepare_model(Model &model);
    void prepare_optimizer(const std::shared_ptr<AcceleratedOptimizer> &optimizer);
    void prepare_dataloader(DataLoaderShard &loader);
    // Fails when preparing `loader` would break a setting (hf_ds_config's batch sizes); changes nothing.
    void check_dataloader(const DataLoaderShard &loader) const;
    void prepare_scheduler(AcceleratedScheduler &scheduler);
    // The same, also remembering the object (Accelerate's _models, _dataloaders, _schedulers lists),
    // which save_state/load_state walk in preparation order.
    void prepare_model(const std::shared_ptr<Model> &model);
    void prepare_dataloader(const std::shared_ptr<DataLoaderShard> &loader);
    void prepare_scheduler(const std::shared_ptr<AcceleratedScheduler> &scheduler);
    const std::vector<std::shared_ptr<Model>> &models() const { return models_; }
    const std::vector<std::shared_ptr<AcceleratedOptimizer>> &optimizers() const { return optimizers_; }
    const std::vector<std::shared_ptr<AcceleratedScheduler>> &schedulers() const { return schedulers_; }
    const std::vector<std::shared_ptr<DataLoaderShard>> &dataloaders() const { return dataloaders_; }
    const std::vector<CheckpointObject> &custom_objects() const { return custom_objects_; }
    // ProjectConfiguration.iteration: the next automatic checkpoint number, +1 after every save_state.
    int64_t project_iteration() const { return project_iteration_; }

    // Checkpoints (src/accelerator/checkpoint.cpp), as Accelerate's save_state / load_state / save_model:
    // the Accelerator collects each prepared part's state_dict() and hands the files to
    // src/checkpointing/, which owns the folder layout and the formats. Returns the folder written/read;
    // `output_dir` / `input_dir` may be null with automatic checkpoint naming.
    std::string save_state(const char *output_dir, const config::SaveStateOptions &options);
    std::string load_state(const char *input_dir, const config::LoadStateOptions &options);
    // Automatic resume (src/accelerator/latest_state.cpp): load_state of the newest complete automatic checkpoint,
    // or nullopt on every process when there is none yet (a fresh start). Collective.
    std::optional<std::string> load_latest_state(const config::LoadStateOptions &options);
    void save_model(const Model &model, const std::string &save_directory, const config::SaveModelOptions &options);
    // Accelerate's get_state_dict(model, unwrap) (src/accelerator/get_state_dict.cpp): the model's state dict in
    // memory, whole under sharding (collective then: every process calls it), as copies. Empty on the processes
    // that options.rank0_only leaves out.
    std::vector<std::pair<std::string, at::Tensor>> get_state_dict(const Model &model,
                                                                   const config::GetStateDictOptions &options);
    // An asynchronous save_state ({"async": true}) in progress: waits for it (collective: afterwards the
    // folder is published for everyone) and reports its failure. Nothing pending: returns at once. The next
    // save_state / load_state wait the same way; free_memory and the destructor wait for this process's part.
    void wait_for_checkpoint();
    // register_save_state_pre_hook / register_load_state_pre_hook (src/accelerator/state_hooks.cpp): `hook`
    // runs on every process with the folder and the process index, before save_state writes its files into
    // the folder (the temporary one it publishes) / before load_state reads one. Returns the handle that
    // remove_state_hook takes (RemovableHandle.remove()).
    using StateHook = std::function<void(const std::string &folder, int32_t process_index)>;
    int64_t register_state_pre_hook(bool save, StateHook hook);
    void remove_state_hook(int64_t handle);
    // Saved as custom_checkpoint_{index}.pkl; returns the index.
    size_t register_for_checkpointing(CheckpointObject object);

    void backward(const at::Tensor &loss);
    // Accelerate's lomo_backward(loss, learning_rate): every prepared lomo / adalomo optimizer updates its
    // parameters during backward, one gradient at a time (src/accelerator/lomo_backward.cpp).
    void lomo_backward(const at::Tensor &loss, double learning_rate);
    // accumulate(model): no_sync applies to `model` only (nullptr: to none, as accumulate() with no models).
    void accumulate_begin(const Model *model = nullptr);
    void accumulate_end();
    double clip_grad_norm(Model &model, double max_norm, double norm_type);
    void clip_grad_value(Model &model, double clip_value);
    bool optimizer_step_was_skipped() const;
    // Mixed precision: scaler.unscale_ on `optimizer` (nullptr: every prepared optimizer) when a gradient
    // scaler is on (fp16), else nothing; accelerator.autocast() as a begin/end pair (thread-local state).
    void unscale_gradients(AcceleratedOptimizer *optimizer);
    void autocast_begin();
    void autocast_end();
    GradScaler *scaler() const { return state_->scaler.get(); }

    // forward, loss, backward, optimizer/scheduler step and zero_grad inside accumulate(); returns the loss.
    double train_step(Model &model, AcceleratedOptimizer &optimizer, AcceleratedScheduler *scheduler,
                      const Batch &batch, const Loss &loss);

    // Distributed (src/distributed, src/parallel/ddp, src/ops/collectives).
    void wait_for_everyone();
    // set_trigger / check_trigger: a flag any process raises and every process sees (one all-reduce).
    void set_trigger() { trigger_ = true; }
    bool check_trigger();
    void main_process_first_begin(bool local);
    void main_process_first_end();
    // join_uneven_inputs(joinables, even_batches) as a begin/end pair (src/accelerator/join.cpp). Empty
    // `joinables`: every prepared model. even_batches -1: the accelerator's dataloader_config.even_batches,
    // else 0/1 overriding it on the prepared map-style loaders until the end. end() is collective when
    // join is on (even_batches false, DDP): it shadows the other ranks' steps until all are done.
    void join_uneven_inputs_begin(const std::vector<Model *> &joinables, int even_batches);
    void join_uneven_inputs_end();
    // DDP statistics of every prepared model, as JSON (benchmarks, diagnostics).
    std::string ddp_stats_json() const;
    // This process's place on the device mesh with Accelerate's rank names (accel_accelerator_get_parallel_ranks_json).
    std::string parallel_ranks_json() const;
    // Per-rank bytes of parameters, gradients, optimizer state and gathered buffers of every prepared
    // model, and the process's peak RSS, as JSON (accel_accelerator_get_memory_stats_json).
    std::string memory_stats_json() const;
    // Sharded models (fsdp_plugin / deepspeed_plugin): gather every parameter / write back and free.
    void summon_full_params(Model &model, bool on);
    // What wraps `model` for parallel training (null: nothing, one process without sharding), and its
    // sharding engine where it is one (checkpoint layouts need the engine's own interface).
    parallel::ParallelWrapper *wrapper_of(const Model &model) const;
    parallel::ShardedDataParallel *sharded_of(const Model &model) const;
    // Whether save_state writes this model and its optimizer in DeepSpeed's layout (deepspeed_plugin, ZeRO
    // 1-3, with a prepared optimizer over it).
    bool deepspeed_layout(const Model &model) const;

    // free_memory / clear: forgets every prepared model, optimizer, scheduler and data loader (they become
    // unprepared objects again: sharded ones whole, DDP's hooks gone) and resets step to 0, so the next
    // training can prepare other objects. Collective when a model is sharded.
    void free_memory();

    // Experiment trackers (log_with, callback trackers): init_trackers / log / end_training / get_tracker.
    tracking::Trackers &trackers();

private:
    // The loss checks of backward; then loss.backward(), a second backward through one graph named as a
    // call-order mistake (retain_graph: the graph stays for another backward).
    static void check_loss(const at::Tensor &loss);
    void run_backward(const at::Tensor &loss, bool retain_graph);
    // One folder's load (load_state): every file read and checked on every process, agreed, then applied.
    void load_folder(const std::string &dir, const config::LoadStateOptions &options);
    bool writes_main_files() const;
    // The process indices that write into the folder this process's main-files writer publishes.
    std::vector<int64_t> checkpoint_writers() const;
    // Joins this process's part of an asynchronous save and rethrows its failure (not collective).
    void finish_async_save();
    // The sharded optimizer over `model` (null when none); DeepSpeed's files of model i and its optimizer
    // (src/accelerator/deepspeed_checkpoint.cpp; collective).
    AcceleratedOptimizer *optimizer_of(const Model &model) const;
    void add_deepspeed_files(std::vector<ckpt::CheckpointFile> &files, size_t i, bool main);
    // One wrapper per wrapped model, in preparation order (parallel/wrapper.hpp).
    std::vector<std::pair<Model *, std::shared_ptr<parallel::ParallelWrapper>>> wrappers_;
    void shard_optimizer(const std::shared_ptr<AcceleratedOptimizer> &optimizer);
    void check_owner(const std::shared_ptr<AcceleratorState> &owner, const char *what) const;
    void refuse_quantized_model_under_parallelism(Model &model) const;
    std::shared_ptr<AcceleratorState> state_;
    std::shared_ptr<void> zero3_init_; // deepspeed_plugin.zero3_init_flag: models built meanwhile are partitioned
    std::vector<std::shared_ptr<AcceleratedOptimizer>> optimizers_;
    std::vector<std::unique_ptr<AutocastScope>> autocast_scopes_; // open autocast_begin calls (null: no-op scope)
    std::vector<std::shared_ptr<Model>> models_;
    std::vector<std::shared_ptr<AcceleratedScheduler>> schedulers_;
    std::vector<std::shared_ptr<DataLoaderShard>> dataloaders_;
    std::vector<CheckpointObject> custom_objects_;
    // Runs the save (or load) pre-hooks in registration order; a failure fails every process alike
    // (collective), naming the hook.
    void run_state_hooks(bool save, const std::string &folder);
    struct RegisteredHook {
        int64_t handle;
        bool save;
        StateHook hook;
    };
    std::vector<RegisteredHook> state_hooks_;
    int64_t next_hook_handle_ = 1;
    int64_t project_iteration_ = 0;
    bool trigger_ = false; // set_trigger() since the last check_trigger() that returned true
    std::unique_ptr<tracking::Trackers> trackers_;
    std::unique_ptr<ckpt::AsyncCheckpoint> pending_save_; // save_state {"async": true} being written
    struct JoinScope;
    std::shared_ptr<JoinScope> join_; // inside join_uneven_inputs (shared_ptr: JoinScope is defined in join.cpp)
};

// Accelerate's load_checkpoint_in_model: weights from a .safetensors or torch file, or a folder (sharded
// with an index, or a single weights file), into `model`.
// Returns what did not match (strict: a mismatch is an error instead).
LoadReport load_checkpoint_in_model(Model &model, const std::string &path, const config::LoadCheckpointOptions &options);
// The same for tensors already read (a checkpoint's, mapped): big_modeling's load_checkpoint_and_dispatch loads the
// part that stays in memory with it.
LoadReport load_checkpoint_tensors(Model &model, std::vector<std::pair<std::string, at::Tensor>> tensors,
                                   const config::LoadCheckpointOptions &options);

} // namespace accel
