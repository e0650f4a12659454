// Accelerator::get_state_dict: Accelerate's accelerator.get_state_dict(model, unwrap) - a model's state dict in
// memory, in one call. A model sharded by fsdp_plugin / deepspeed_plugin is gathered whole first (FSDP's
// FULL_STATE_DICT, DeepSpeed's ZeRO-3 consolidated state dict), the same gathering save_model does, and given
// back to its shards afterwards; a model split by tensor parallelism likewise over its tp group.
#include "accelerator/accelerator.hpp"

#include "common/error.hpp"
#include "model/model.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/stage_checkpoint.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "parallel/wrapper.hpp"

#include <ATen/ATen.h>


namespace accel {

namespace {

// Accelerate hands the tensors of a sharded model to rank 0 only: FSDP's default state_dict_config is
// FullStateDictConfig(offload_to_cpu=True, rank0_only=True), and DeepSpeed's _zero3_consolidated_16bit_state_dict
// returns None elsewhere. ZeRO 0-2 and everything else: each process its own model.state_dict().
bool rank0_only_by_default(const config::ShardingConfig &s)
{
    return s.frontend == "fsdp" || (s.frontend == "deepspeed" && s.zero_stage == 3);
}

// A sharded model's parameters whole while this lives (collective: all-gathers), then back to the shards. A
// model the user summoned already stays as it is.
class WholeWhileCopying {
public:
    explicit WholeWhileCopying(parallel::ShardedDataParallel *engine)
    {
        if (engine == nullptr || engine->summoned()) return;
        engine->summon_full_params(true);
        engine_ = engine;
    }
    ~WholeWhileCopying()
    {
        if (engine_ == nullptr) return;
        try {
            engine_->summon_full_params(false); // local: copies back into the shard, frees the whole buffers
        } catch (...) {
        }
    }
    WholeWhileCopying(const WholeWhileCopying &) = delete;
    WholeWhileCopying &operator=(const WholeWhileCopying &) = delete;

private:
    parallel::ShardedDataParallel *engine_ = nullptr;
};

// Copies of the state dict's tensors, so that training on does not change them (the state dict lists each
// tensor once, under its parameter's or buffer's name: a tied weight is one parameter).
NamedTensors snapshot(const NamedTensors &sd, const std::string &prefix)
{
    NamedTensors out;
    out.reserve(sd.size());
    for (const auto &[name, t] : sd) out.emplace_back(prefix + name, t.clone(at::MemoryFormat::Contiguous));
    return out;
}

} // namespace

NamedTensors Accelerator::get_state_dict(const Model &model, const config::GetStateDictOptions &options)
{
    if (model.prepared_by != nullptr && model.prepared_by != state_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "model: prepared by another accelerator");
    parallel::ParallelWrapper *wrapper = wrapper_of(model);
    parallel::ShardedDataParallel *engine = wrapper != nullptr ? wrapper->sharded() : nullptr;
    const bool rank0_only = options.rank0_only.value_or(engine != nullptr && rank0_only_by_default(config().sharding));
    // unwrap=False: the keys of the wrapped module. Only DDP renames them ("module."); FSDP's FULL_STATE_DICT
    // keys are the model's own, and Accelerate ignores unwrap under DeepSpeed.
    const std::string prefix = !options.unwrap && engine == nullptr && wrapper != nullptr && wrapper->ddp() != nullptr
                                   ? "module."
                                   : "";
    WholeWhileCopying whole(engine); // every process: the gathering is collective
    // A pipeline stage holds only its blocks (under pp x sharding the engine has just gathered them whole): the
    // others' are filled in from their stages (collective over pp; with rank0_only onto the main process's stage
    // alone, under pp x tp its tp group's)...
    parallel::pp::PipelineParallel *pipeline = wrapper != nullptr ? wrapper->pipeline() : nullptr;
    const parallel::pp::WholeStages pp_whole =
        rank0_only && pipeline != nullptr
            ? parallel::pp::WholeStages(pipeline, {}, false,
                                        parallel::pp::WholeStages::FirstStageOnly{
                                            parallel::pp::near_writer(model, state_->process_index() == 0)})
            : parallel::pp::WholeStages(pipeline);
    // ...then, under tensor parallelism, each split parameter gathered whole over the tp group, as save_model does.
    parallel::tp::WholeForCheckpoint tp_whole(std::vector<parallel::tp::WholeForCheckpoint::Part>{{&model, {}}});
    model.check_tensor_access("get_state_dict");
    if (rank0_only && state_->process_index() != 0) return {};
    return snapshot(model.state_dict(/*dedupe_shared=*/false), prefix);
}

} // namespace accel
