// A GPT-2 decoder ({"type": "gpt"}), computed as Hugging Face's GPT2LMHeadModel computes it, with its
// parameter names and shapes (Conv1D weights stored [in, out], lm_head tied to transformer.wte).
#pragma once

#include "config/gpt_config.hpp"
#include "model/linear.hpp"
#include "model/kv_cache.hpp"
#include "model/model.hpp"
#include "parallel/pipeline/stage_model.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/tensor_parallel/tp_plan.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace accel::distributed {
class Communicator;
}
namespace accel::parallel::cp {
struct ContextParallel;
}
namespace accel::parallel::tp {
class DropoutGenerator;
}

namespace accel {

struct GptBlock;

// Keys and values of the positions seen so far, one [B, n_head, T, head_dim] pair per block.
using GptKvCache = KvCache;

class GptModel final : public Model, public parallel::tp::TensorParallelModel, public parallel::pp::PipelineStageModel {
public:
    // `on_parameter` (optional): called with each parameter tensor right after it is made (model.hpp).
    explicit GptModel(const config::GptConfig &config, const ParameterFn &on_parameter = {});
    ~GptModel() override;

    // input_ids [B, T] (or [T]) int64 -> logits [B, T, vocab_size] (or [T, vocab_size]).
    at::Tensor forward(const at::Tensor &input) override;
    // Incremental decoding: `input` [B, T] holds the tokens after the cached ones; the cache grows by T.
    // Runs without dropout and without checkpointing (generation).
    at::Tensor forward_cached(const at::Tensor &input, GptKvCache &cache);

    void train(bool on) override { training_ = on; }
    bool is_training() const override { return training_; }
    std::vector<ModuleUnit> units() const override;
    // For a sharding engine's wrap policies: layer 0 is everything outside the blocks (embeddings, final
    // norm, head; it spans the whole forward, as the tied head reuses the token embedding at the end),
    // layers 1..n_layer are the blocks ("gpt_block").
    std::vector<std::string> layer_types() const override;
    std::vector<size_t> parameter_layers() const override;
    // Blocks only: layer 0 spans the whole forward and is never recomputed.
    void set_activation_checkpointing(const std::vector<bool> &layers) override;
    // recompute_granularity "selective" turned on or off after the model was built (MegatronLMPlugin's
    // recompute_activation, applied at prepare): the same as building it with that spec.
    void set_selective_recompute(bool on);
    bool activation_checkpointing() const override;
    const config::GptConfig &config() const { return config_; }
    std::string hf_config_json() const override { return config::gpt_config_to_hf_json(config_); }
    int64_t hidden_size() const override { return config_.n_embd; } // GPT2Config.hidden_size is n_embd
    // Per block: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj (the tied lm_head is not a slot).
    std::vector<LinearSlot> linear_slots() override;

    // Tensor parallelism over `group` (GPT-2's plan, applied at prepare by parallel/tensor_parallel/plan.hpp):
    // each planned parameter is narrowed in place to this rank's slice (set_data: names and tensors stay):
    // c_attn column-parallel by heads (this rank's heads' q, k and v), c_fc column-parallel, attn.c_proj and
    // mlp.c_proj row-parallel, the token embedding and the (tied) head vocabulary-parallel over the
    // vocabulary padded to a multiple of the group's size; layer norms and position embeddings replicated.
    // forward() then returns this rank's columns of the logits [B, T, V_padded / tp], marked for the
    // vocabulary-parallel cross-entropy (split_outputs.hpp). INVALID_ARGUMENT naming n_head or n_inner when
    // they do not divide by the group's size; UNIMPLEMENTED for fp8 linears. LoRA adapters are split with their
    // layers (plan_linear.hpp). The model's tp_plan overrides (set_tp_plan) may replicate an attention or an MLP
    // ("replicate" on its linears: parallel/tensor_parallel/tp_plan.hpp), named refusals for what cannot be.
    void apply_tensor_parallel(const std::shared_ptr<distributed::Communicator> &group) override;
    // Megatron's sequence parallelism with the tensor parallelism applied next (set before it): the embeddings'
    // sum is scattered along the sequence, every layer norm, dropout and residual add runs on this rank's 1/tp of
    // the positions, the column layers all-gather the sequence and the row layers reduce-scatter it (instead of
    // the all-reduce), and the head gathers it. The norms' and row biases' gradients are summed over tp. forward
    // then needs a sequence length dividing by tp and no key/value cache (INVALID_ARGUMENT / UNIMPLEMENTED named).
    void set_sequence_parallel(bool on) { sequence_parallel_ = on; }
    bool sequence_parallel() const override { return sequence_parallel_ && tp_group_ != nullptr; }
    // How each parameter (by name) is split: empty without tensor parallelism.
    const std::map<std::string, parallel::tp::ParameterSlicing> &tensor_parallel_slicing() const override
    {
        return tp_slicing_;
    }
    // Context parallelism (applied at prepare by parallel/context_parallel/plan.hpp): forward() then takes this
    // rank's part of each sequence (sequence_split.hpp: what the prepared loader yields), embeds it at its
    // whole-sequence positions, runs every block's attention over the whole sequence through the cp group, and
    // marks its logits so that compute_loss averages over the whole sequence. No key/value cache (generation).
    void apply_context_parallel(std::shared_ptr<const parallel::cp::ContextParallel> cp);
    const std::shared_ptr<const parallel::cp::ContextParallel> &context_parallel() const { return cp_; }

    // Pipeline parallelism (applied at prepare by parallel/pipeline/; PipelineStageModel, stage_model.hpp): this model
    // becomes the stage holding blocks [first_block, end_block) (or several chunks of them: interleaved); every other
    // parameter is emptied in place. The first stage keeps the embeddings, the last the final norm and the head (the
    // token embedding too when tied; the pipeline sums its gradient over the two). forward() and forward_cached() run
    // the whole model through the pipeline set by set_pipeline_forward; refused by name without one.
    void apply_pipeline_stage(int64_t first_block, int64_t end_block, bool first, bool last);
    void apply_pipeline_stage(const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first, bool last) override;
    at::Tensor forward_stage(const at::Tensor &input, KvCache *cache) override;
    void mark_logits(const at::Tensor &logits) const override;
    Model &stage_model() override { return *this; }
    Shape pipeline_shape() const override;
    std::vector<int64_t> block_costs() const override;
    at::Tensor tied_embedding() const override { return config_.tie_word_embeddings ? wte_ : at::Tensor(); }
    const std::shared_ptr<distributed::Communicator> &tensor_parallel_group() const override { return tp_group_; }
    std::shared_ptr<parallel::tp::DropoutGenerator> tensor_parallel_dropout() const override { return tp_dropout_; }

protected:
    std::string canonical_key(const std::string &key) const override;

private:
    at::Tensor run(const at::Tensor &input, GptKvCache *cache);
    at::Tensor embed(const at::Tensor &ids, int64_t past, bool train);
    config::GptConfig config_;
    at::Tensor wte_, wpe_, ln_f_w_, ln_f_b_, lm_head_; // lm_head_ is wte_ when tied
    std::shared_ptr<Linear> lm_head_linear_;             // over lm_head_
    std::vector<std::shared_ptr<GptBlock>> blocks_;
    bool training_ = true;
    std::vector<bool> checkpointed_; // per block
    std::vector<parallel::tp::PlanModule> plan_modules() const; // the built-in plan, for the tp_plan overrides
    std::shared_ptr<distributed::Communicator> tp_group_; // set by apply_tensor_parallel
    bool sequence_parallel_ = false;                      // set_sequence_parallel
    std::shared_ptr<parallel::tp::DropoutGenerator> tp_dropout_; // this tp rank's, for the split regions
    int64_t vocab_start_ = 0;                             // this rank's first vocabulary row under it
    std::map<std::string, parallel::tp::ParameterSlicing> tp_slicing_;
    std::shared_ptr<const parallel::cp::ContextParallel> cp_; // set by apply_context_parallel
};

} // namespace accel
