// Pipeline parallelism (parallelism_config.pp_size, num_micro_batches, pp_schedule; issue 36): each rank of
// the pp group holds one stage of a GPT model's blocks (GptModel::apply_pipeline_stage), and train_step runs
// a schedule (schedule.hpp: "gpipe" or "1f1b") over the micro-batches of each batch: activations sent forward
// and their gradients backward, point to point between neighbouring stages, in an order both sides of a link
// share (so blocking sends cannot deadlock, and NCCL, which matches by issue order and has no tags, pairs them
// as gloo and MPI do by tag). With dp_replicate_size > 1 every stage is replicated: DDP over the stage's
// data-parallel group averages its gradients after the batch's last backward (pp x dp).
#pragma once

#include "parallel/wrapper.hpp"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accel {
class GptModel;
namespace config {
struct DistributedDataParallelKwargs;
struct ParallelismConfig;
} // namespace config
namespace distributed {
class Communicator;
class DeviceMesh;
} // namespace distributed
} // namespace accel

namespace accel::parallel::pp {

// Seconds of the last schedule on this rank: its whole length and the part spent computing (forward,
// loss, backward); the rest is the bubble (waiting on neighbours, and the transfers).
// peak_live: the most micro-batches whose activations the stage held at once (m under gpipe, at most
// stages - stage under 1f1b).
struct ScheduleTimes {
    double wall = 0.0, busy = 0.0;
    int64_t peak_live = 0;
    double bubble_fraction() const { return wall > 0.0 ? 1.0 - busy / wall : 0.0; }
};

class PipelineParallel final : public ParallelWrapper {
public:
    // dp_group: the stage's data-parallel replicas (null or one rank: none); the stage's parameters are
    // broadcast from its first replica here.
    PipelineParallel(GptModel &model, std::shared_ptr<distributed::Communicator> pp_group, int32_t num_micro_batches,
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
    const ScheduleTimes &last_times() const { return times_; }
    int32_t stage() const;
    int32_t num_stages() const;
    int32_t chunks() const; // model chunks (virtual stages) this stage holds: 1 unless interleaved
    const std::string &schedule() const { return schedule_; }
    int32_t num_micro_batches() const { return micro_batches_; }

    void set_require_sync(bool on) override { require_sync_ = on; }
    void finish_backward() override {}
    void abort_backward() override {}
    double clip_grad_norm(double max_norm, double norm_type, bool clip) override;
    void clip_grad_value(double clip_value) override;
    WrapperMemory memory() const override;
    // free_memory: the model stays cut into its stage (the limitations page says so).
    void release(Model &) override {}
    PipelineParallel *pipeline() override { return this; }
    // Every parameter of the whole model filled in from the first stage holding it (collective over the pp
    // group): the ones this stage does not hold, which WholeStages empties again.
    std::vector<at::Tensor> borrow_other_stages();

private:
    void sync_tied_gradient();
    std::vector<at::Tensor> counted_parameters() const; // each parameter of the whole model on one stage only

    GptModel &model_;
    std::shared_ptr<distributed::Communicator> pp_;
    int32_t micro_batches_;
    std::string schedule_;
    std::shared_ptr<DistributedDataParallel> dp_; // null without data-parallel replicas
    std::vector<at::Tensor> params_; // this stage's (non-empty) parameters
    at::Tensor tied_;                // the token embedding on the first and last stage when the head is tied
    bool require_sync_ = true;
    ScheduleTimes times_;
};

// prepare's step for pp_size > 1: the model's stage cut (pp_split_points or balanced by parameter count)
// and the wrapper (with DDP over the stage's dp group when it has replicas, `ddp` its options). UNIMPLEMENTED for models other than gpt.
std::shared_ptr<PipelineParallel> prepare_pipeline(Model &model, const distributed::DeviceMesh &mesh,
                                                   const config::ParallelismConfig &config,
                                                   const config::DistributedDataParallelKwargs *ddp = nullptr);

// save_model / get_state_dict of a pipeline model: while this lives every parameter is whole on each rank of
// the pp group, as tensor parallelism's WholeForCheckpoint gathers its slices, so the main process writes one
// process's weights; then each stage holds only its own again. Nothing for a null pipeline.
class WholeStages {
public:
    explicit WholeStages(PipelineParallel *pipeline);
    ~WholeStages();
    WholeStages(const WholeStages &) = delete;
    WholeStages &operator=(const WholeStages &) = delete;

private:
    std::vector<at::Tensor> borrowed_;
};

// save_state / load_state of a pipeline-stage model: UNIMPLEMENTED naming `what` (the optimizer state of the
// other stages' parameters is not gathered yet).
void refuse_checkpoint_of_pipeline_model(const Model &model, const char *what);

} // namespace accel::parallel::pp
