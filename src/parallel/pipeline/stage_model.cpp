#include "parallel/pipeline/stage_model.hpp"

#include "common/error.hpp"
#include "model/model.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <set>

namespace accel::parallel::pp {

void PipelineStageModel::select_pipeline_chunk(size_t chunk)
{
    if (!pipelined_ || chunk >= stage_chunks_.size())
        fail(ACCEL_ERR_INTERNAL, "pipeline chunk " + std::to_string(chunk) + " of " + std::to_string(stage_chunks_.size()));
    block_begin_ = stage_chunks_[chunk].first;
    block_end_ = stage_chunks_[chunk].second;
    stage_first_ = holds_embeddings_ && chunk == 0;
    stage_last_ = holds_head_ && chunk + 1 == stage_chunks_.size();
}

void PipelineStageModel::set_pipeline_forward(Forward forward, std::shared_ptr<distributed::Communicator> group)
{
    pipeline_forward_ = std::move(forward);
    pp_group_ = std::move(group);
}

void PipelineStageModel::cut_stage(Model &model, const char *type, const std::vector<std::pair<int64_t, int64_t>> &chunks,
                                   bool first, bool last, size_t blocks,
                                   const std::function<std::vector<at::Tensor>(size_t)> &block_params,
                                   const std::vector<at::Tensor> &first_params, const std::vector<at::Tensor> &last_params)
{
    const auto n = static_cast<int64_t>(blocks);
    if (pipelined_) fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(type) + ": pipeline parallelism is already applied");
    if (chunks.empty()) fail(ACCEL_ERR_INTERNAL, std::string(type) + ": a pipeline stage without blocks");
    // What this stage keeps: its chunks' blocks, the embeddings on the first, the final norm and head on the last.
    std::set<const void *> kept;
    std::vector<std::pair<size_t, size_t>> ranges;
    for (const auto &[first_block, end_block] : chunks) {
        if (first_block < 0 || end_block > n || first_block >= end_block)
            fail(ACCEL_ERR_INTERNAL, std::string(type) + ": pipeline stage of blocks [" + std::to_string(first_block) +
                                         ", " + std::to_string(end_block) + ") of " + std::to_string(n));
        for (int64_t i = first_block; i < end_block; ++i)
            for (const auto &t : block_params(static_cast<size_t>(i))) kept.insert(t.unsafeGetTensorImpl());
        ranges.emplace_back(static_cast<size_t>(first_block), static_cast<size_t>(end_block));
    }
    if (first)
        for (const auto &t : first_params) kept.insert(t.unsafeGetTensorImpl());
    if (last)
        for (const auto &t : last_params) kept.insert(t.unsafeGetTensorImpl());
    at::NoGradGuard no_grad;
    for (const auto &np : model.named_parameters())
        if (kept.count(np.second.unsafeGetTensorImpl()) == 0) {
            at::Tensor t = np.second;
            t.set_data(at::empty({0}, t.options()));
        }
    stage_chunks_ = std::move(ranges);
    holds_embeddings_ = first;
    holds_head_ = last;
    pipelined_ = true;
    select_pipeline_chunk(0);
}

std::vector<int64_t> PipelineStageModel::costs_by_name(const Model &model, const std::string &prefix, size_t blocks)
{
    std::vector<int64_t> costs(blocks, 0);
    for (const auto &[name, t] : model.named_parameters())
        if (name.compare(0, prefix.size(), prefix) == 0) costs[std::stoul(name.substr(prefix.size()))] += t.numel();
    return costs;
}

int64_t PipelineStageModel::cached_positions(const KvCache &cache) const
{
    return block_begin_ < cache.keys.size() && cache.keys[block_begin_].defined() ? cache.keys[block_begin_].size(2) : 0;
}

// Reached when the model was cut into a stage but no pipeline was set to run it: prepare sets one right after
// the cut, so the cut was made without it (apply_pipeline_stage alone, or a prepare that failed in between). A
// pipeline that was set and is gone says so itself (prepare_pipeline's forward).
at::Tensor PipelineStageModel::through_pipeline(const at::Tensor &input, KvCache *cache, const char *what)
{
    if (!pipeline_forward_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(what) + " of a pipeline stage (this model holds only some of its "
                                                               "blocks) needs a pipeline to run the whole model, and none "
                                                               "was set: the model was cut into a stage without a prepared "
                                                               "pipeline (accel_accelerator_prepare with parallelism_config."
                                                               "pp_size > 1 sets one); build the model again and prepare it");
    return pipeline_forward_(input, cache);
}

} // namespace accel::parallel::pp
