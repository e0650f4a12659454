// Pipeline parallelism (parallelism_config.pp_size, num_micro_batches, pp_schedule; issue 36): each rank of
// the pp group holds one stage of a model's blocks (PipelineStageModel::apply_pipeline_stage: gpt, llama), and train_step runs
// a schedule (schedule.hpp: "gpipe" or "1f1b") over the micro-batches of each batch: activations sent forward
// and their gradients backward, point to point between neighbouring stages, in an order both sides of a link
// share (so blocking sends cannot deadlock, and NCCL, which matches by issue order and has no tags, pairs them
// as gloo and MPI do by tag). With dp_replicate_size > 1 every stage is replicated: DDP over the stage's
// data-parallel group averages its gradients after the batch's last backward (pp x dp).
// With tp_size > 1 (pp x tp, Megatron's layout: tp innermost) every stage's model is first split by its
// tensor-parallel plan over the stage's tp group, and the pp group links the same tp rank of each stage: each
// sends its hidden states (replicated over tp; under sequence parallelism its 1/tp of the positions) to its
// counterpart. The head's vocabulary-parallel loss runs over the last stage's tp group.
#pragma once

#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/stage_model.hpp"
#include "parallel/wrapper.hpp"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accel {
class AcceleratedOptimizer;
namespace config {
struct DistributedDataParallelKwargs;
struct ParallelismConfig;
struct ShardingConfig;
} // namespace config
namespace distributed {
class Communicator;
class DeviceMesh;
} // namespace distributed
} // namespace accel

namespace accel::parallel::pp {

// Seconds of the last schedule on this rank: its whole length and the part spent computing (forward,
// loss, backward); the rest is the bubble (waiting on neighbours, and the transfers). `after`: the part of `wall`
// after the stage's last operation (the gradients' reductions over dp, the tied embedding's exchange, the loss's
// broadcast): mostly the wait for the other stages' schedules to end (the last stage's is over first).
// peak_live: the most micro-batches whose activations the stage held at once (m under gpipe, at most
// stages - stage under 1f1b).
struct ScheduleTimes {
    double wall = 0.0, busy = 0.0, after = 0.0;
    int64_t peak_live = 0;
    double bubble_fraction() const { return wall > 0.0 ? 1.0 - busy / wall : 0.0; }
};

class PipelineParallel final : public ParallelWrapper {
public:
    // dp_group: the stage's data-parallel replicas (null or one rank: none); the stage's parameters are
    // broadcast from its first replica here.
    PipelineParallel(PipelineStageModel &model, std::shared_ptr<distributed::Communicator> pp_group, int32_t num_micro_batches,
                     std::string schedule = "gpipe", std::shared_ptr<distributed::Communicator> dp_group = nullptr,
                     const config::DistributedDataParallelKwargs *ddp = nullptr);

    // The loss of one micro-batch's logits against its labels, and what is applied to it before its
    // backward (the accelerator's division by gradient_accumulation_steps and the fp16 scaler).
    using LossFn = std::function<at::Tensor(const at::Tensor &logits, const at::Tensor &labels)>;
    using ScaleFn = std::function<at::Tensor(const at::Tensor &loss)>;
    // One batch through the schedule (collective over the pp group; every rank passes the same batch):
    // gradients of the batch's mean micro-batch loss accumulated into this stage's parameters. Returns that
    // loss on every rank (broadcast from the last stage). INVALID_ARGUMENT when the batch's first dimension
    // does not divide into the micro-batches.
    double run(const at::Tensor &inputs, const at::Tensor &labels, const LossFn &loss, const ScaleFn &scale);
    // The prepare_pippy equivalent (what the model's forward() and generation run on a stage; collective over
    // the pp group, every rank passing the same token ids [batch, seq] or [seq]): the whole model's logits on
    // every rank (the last stage's, broadcast). Inference: no gradients. The rows go through in up to
    // num_micro_batches micro-batches, GPipe's order (stage s runs micro-batch i while s + 1 runs i - 1); with
    // `cache` (generation) in one, each stage keeping its own blocks' keys and values. The ids are checked on
    // every rank before anything is sent, so a bad input fails everywhere alike instead of leaving the other
    // stages waiting.
    at::Tensor forward(const at::Tensor &input, KvCache *cache);
    const ScheduleTimes &last_times() const { return times_; }
    int32_t stage() const;
    int32_t num_stages() const;
    // The group linking the stages (stage s is its rank s): the checkpoint code's collectives over the stages.
    const std::shared_ptr<distributed::Communicator> &pp_group() const { return pp_; }
    int32_t chunks() const; // model chunks (virtual stages) this stage holds: 1 unless interleaved
    const std::string &schedule() const { return schedule_; }
    int32_t num_micro_batches() const { return micro_batches_; }
    // pp x cp: the stage's cp group (its model already under context parallelism), for the checks every rank
    // makes before sending: the part of the sequence each cp rank holds, and no generation.
    void set_context_parallel(std::shared_ptr<distributed::Communicator> group) { cp_ = std::move(group); }

    void set_require_sync(bool on) override { require_sync_ = on; }
    void finish_backward() override {}
    void abort_backward() override {}
    double clip_grad_norm(double max_norm, double norm_type, bool clip) override;
    void clip_grad_value(double clip_value) override;
    WrapperMemory memory() const override;
    // free_memory: the model stays cut into its stage (the limitations page says so).
    void release(Model &) override {}
    PipelineParallel *pipeline() override { return this; }
    // pp x sharding (fsdp_plugin / deepspeed_plugin): the engine over this stage's parameters (`model`, the stage,
    // whose forward hooks it installed) instead of DDP. Design: the pipeline holds the engine, as it holds DDP,
    // rather than the engine wrapping a pipeline: the schedule decides when a stage's gradients are final (after
    // every micro-batch's backward, and the tied embedding's exchange between the first and last stage), which
    // the engine alone cannot see. Each micro-batch's backward is one of the engine's passes (its buffers freed
    // between them as after a forward), the gradients reduced once after the schedule; the accelerator finds the
    // engine through sharded() for the optimizer's shards.
    void shard_with(std::shared_ptr<ShardedDataParallel> engine, Model &model);
    ShardedDataParallel *sharded() override { return engine_.get(); }
    // Sharded: the engine gathers (or frees) the stage's parameters; the other stages' stay empty. Else refused.
    void summon_full_params(bool on) override;
    bool summoned() const override;
    // Per parameter of the whole model (named_parameters order), the first stage holding it (collective).
    std::vector<int32_t> owners();
    // Every parameter of the whole model filled in from its owner (collective over the pp group): the ones
    // this stage does not hold, which WholeStages empties again.
    // `keep` false: this rank takes part in the broadcasts but keeps nothing (WholeStages' first-stage-only mode).
    std::vector<at::Tensor> borrow_other_stages(const std::vector<int32_t> &owners, bool keep = true);
    // `optimizer`'s state of each parameter in `borrowed` filled in from its owner (collective): the whole
    // model's state on every rank, in one process's parameter order, as its state_dict() then writes it.
    void borrow_optimizer_state(AcceleratedOptimizer &optimizer, const std::vector<int32_t> &owners,
                                const std::vector<at::Tensor> &borrowed);

private:
    void sync_tied_gradient();
    std::vector<at::Tensor> counted_parameters() const; // each parameter of the whole model on one stage only
    // The positions a stage boundary carries of a sequence of `length` (1/tp of them under sequence
    // parallelism), after checking on every rank what the first stage would refuse, so no stage is left waiting.
    int64_t boundary_length(int64_t length, bool cached) const;

    PipelineStageModel &model_;
    std::shared_ptr<distributed::Communicator> pp_;
    int32_t micro_batches_;
    std::string schedule_;
    std::vector<Op> ops_; // this stage's schedule of every batch
    // Each chunk's last backward in ops_: its parameters' gradients are final there (DDP synchronises them then).
    std::vector<size_t> last_backward_;
    std::shared_ptr<DistributedDataParallel> dp_; // null without data-parallel replicas
    std::shared_ptr<ShardedDataParallel> engine_; // pp x sharding (shard_with): instead of dp_
    Model *hooked_ = nullptr;                     // the stage model whose forward hooks engine_ installed
    std::vector<at::Tensor> params_; // this stage's (non-empty) parameters
    std::shared_ptr<distributed::Communicator> tp_; // the stage's tp group under pp x tp, else null
    std::vector<at::Tensor> tp_split_;              // the parameters of params_ split over tp_
    std::shared_ptr<distributed::Communicator> cp_; // the stage's cp group under pp x cp, else null
    at::Tensor tied_;                // the token embedding on the first and last stage when the head is tied
    bool require_sync_ = true;
    ScheduleTimes times_;
};

// prepare's step for pp_size > 1: the model's stage cut (pp_split_points or balanced by parameter count)
// and the wrapper (with DDP over the stage's dp group when it has replicas, `ddp` its options). UNIMPLEMENTED for a model that is not a
// PipelineStageModel (stage_model.hpp).
std::shared_ptr<PipelineParallel> prepare_pipeline(Model &model, const distributed::DeviceMesh &mesh,
                                                   const config::ParallelismConfig &config,
                                                   const config::DistributedDataParallelKwargs *ddp = nullptr,
                                                   const config::ShardingConfig *sharding = nullptr);

// get_state_dict / save_state of a pipeline model (and save_model's PEFT and save_on_each_node cases; the other
// save_model writes stage by stage, stage_checkpoint.hpp, and load_state reads each stage's part): while this lives
// every parameter is whole on each rank of the pp group (FirstStageOnly: on the writer's first stage only), as
// tensor parallelism's WholeForCheckpoint gathers its slices, so the main process writes one process's weights
// (and, with `gather_state`, the optimizers' state of every parameter: save_state's FULL layout); then each stage
// holds only its own parameters again, and its optimizers only their state. Nothing for a null pipeline.
class WholeStages {
public:
    explicit WholeStages(PipelineParallel *pipeline, std::vector<AcceleratedOptimizer *> optimizers = {},
                         bool gather_state = false);
    // Whole on the first stage only, and only in the pp groups whose first stage has `near_writer` set (the
    // process writing the main files, or under pp x tp a rank of its tp group, which gathers the slices it
    // writes): save_state and a rank-0-only get_state_dict, so the ranks that do not write borrow nothing (each
    // tensor passes through them one at a time). Collective over the pp group.
    struct FirstStageOnly {
        bool near_writer;
    };
    WholeStages(PipelineParallel *pipeline, std::vector<AcceleratedOptimizer *> optimizers, bool gather_state,
                FirstStageOnly only);
    ~WholeStages();
    WholeStages(const WholeStages &) = delete;
    WholeStages &operator=(const WholeStages &) = delete;

private:
    // The other stages' parameters (and with `gather_state` their optimizer state) filled in; `keep` false: this
    // rank only takes part in the broadcasts.
    void take(PipelineParallel *pipeline, std::vector<AcceleratedOptimizer *> optimizers, bool gather_state, bool keep);
    void release() noexcept;
    std::vector<at::Tensor> borrowed_;
    std::vector<AcceleratedOptimizer *> optimizers_;
};

} // namespace accel::parallel::pp
