// What pipeline parallelism (pipeline_parallel.hpp) needs of a model (issue 36): a model whose blocks can be cut
// into stages, each rank running its own (GptModel, LlamaModel). The stage bookkeeping every such model shares
// (its chunks of blocks, which one runs, the pipeline that runs the whole model) lives here; the model answers
// what depends on its layout (its blocks' costs, its sizes, its tied embedding, the cut of its tensors, a stage's
// forward).
#pragma once

#include "model/kv_cache.hpp"
#include "parallel/tensor_parallel/slicing.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel {
class Model;
}
namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::pp {

class PipelineStageModel {
public:
    // The whole model's forward through the pipeline (collective over its pp group); `cache`: generation.
    using Forward = std::function<at::Tensor(const at::Tensor &input, KvCache *cache)>;
    // What the pipeline checks and allocates by: the hidden states between stages are [B, T, hidden_size].
    struct Shape {
        const char *type = "";       // the spec's model type, for messages ("gpt", "llama")
        int64_t hidden_size = 0;
        int64_t vocab_size = 0;
        int64_t max_positions = 0;   // 0: no limit (rotary embeddings)
        const char *max_positions_key = "";
    };

    virtual ~PipelineStageModel() = default;

    virtual Model &stage_model() = 0; // this model, as a Model (its parameters by name)
    virtual Shape pipeline_shape() const = 0;
    // Each block's parameter count (the balanced cut's costs) as the model is now (LoRA adapters count).
    virtual std::vector<int64_t> block_costs() const = 0;
    // The token embedding when the head is tied to it (held by the first and the last stage), else undefined.
    virtual at::Tensor tied_embedding() const = 0;
    // This model becomes the stage holding the blocks of `chunks` ([begin, end) each; several: interleaved), the
    // embeddings when `first`, the final norm and head when `last`; every other parameter is emptied in place
    // (set_data to zero elements: names stay, so an optimizer made before prepare keeps its list). Under tensor
    // parallelism (applied first: pp x tp) the stage keeps its tp slices.
    virtual void apply_pipeline_stage(const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first, bool last) = 0;
    // The selected chunk (select_pipeline_chunk): token ids -> hidden states on the first stage's first chunk, hidden ->
    // hidden between, hidden -> logits on the last stage's last chunk; with `cache`: the chunk's blocks' keys and values.
    virtual at::Tensor forward_stage(const at::Tensor &input, KvCache *cache) = 0;
    // The marks the model's forward puts on its logits (vocabulary-parallel under tp, context-parallel under cp), for
    // logits a pipeline broadcast from the last stage (a copy, unmarked).
    virtual void mark_logits(const at::Tensor &logits) const = 0;
    // Sequence parallelism under tp: the hidden states between stages hold this rank's 1/tp of the positions.
    virtual bool sequence_parallel() const = 0;
    virtual const std::shared_ptr<distributed::Communicator> &tensor_parallel_group() const = 0;
    virtual const std::map<std::string, tp::ParameterSlicing> &tensor_parallel_slicing() const = 0;

    // Interleaved pipelines: the stage holds several chunks of blocks (virtual stages); forward_stage runs chunk `chunk`.
    void select_pipeline_chunk(size_t chunk);
    size_t pipeline_chunks() const { return stage_chunks_.size(); }
    bool pipelined() const { return pipelined_; }
    // The model's forward() and generation run the whole model through `forward` (collective over `group`, the pp
    // group) while the pipeline lives; refused by name without one.
    void set_pipeline_forward(Forward forward, std::shared_ptr<distributed::Communicator> group);
    const std::shared_ptr<distributed::Communicator> &pipeline_group() const { return pp_group_; }

protected:
    // The cut (apply_pipeline_stage's common part): keeps the parameters of `chunks`' blocks (block_params(i): block
    // i's), `first_params` when first and `last_params` when last, empties the rest of `model`'s; INTERNAL naming
    // `type` for chunks outside [0, blocks) or a cut made twice.
    void cut_stage(Model &model, const char *type, const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first,
                   bool last, size_t blocks, const std::function<std::vector<at::Tensor>(size_t)> &block_params,
                   const std::vector<at::Tensor> &first_params, const std::vector<at::Tensor> &last_params);
    // block_costs() of a model whose block i's parameters are named `prefix` + i + "." (LoRA adapters included).
    static std::vector<int64_t> costs_by_name(const Model &model, const std::string &prefix, size_t blocks);
    // The positions the selected chunk's blocks have cached (an interleaved stage's later chunk runs after its earlier
    // one has added this call's positions to the earlier blocks' entries); `cache` holds an entry per block.
    int64_t cached_positions(const KvCache &cache) const;
    // forward() / forward_cached() of a cut model: through the pipeline; FAILED_PRECONDITION when none was set.
    at::Tensor through_pipeline(const at::Tensor &input, KvCache *cache, const char *what);

    // The chunk selected: its blocks [block_begin_, block_end_) and whether it takes token ids (the first stage's
    // first chunk) and ends with the head (the last stage's last). The whole model without a cut (block_end_ is set
    // by the model to its number of blocks).
    size_t block_begin_ = 0, block_end_ = 0;
    bool stage_first_ = true, stage_last_ = true;

private:
    std::vector<std::pair<size_t, size_t>> stage_chunks_;
    bool holds_embeddings_ = true, holds_head_ = true, pipelined_ = false;
    Forward pipeline_forward_;
    std::shared_ptr<distributed::Communicator> pp_group_;
};

} // namespace accel::parallel::pp
