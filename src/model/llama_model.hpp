// The Llama family ({"type": "llama"}: Llama, Mistral, Qwen2), computed as transformers' LlamaForCausalLM /
// MistralForCausalLM / Qwen2ForCausalLM compute it (eager attention), with their parameter names and shapes
// (model.embed_tokens.weight, model.layers.<i>.self_attn.q_proj.weight, ..., lm_head.weight). Every projection
// goes through the linear seam (model/linear.hpp), listed by linear_slots().
#pragma once

#include "config/llama_config.hpp"
#include "model/linear.hpp"
#include "model/kv_cache.hpp"
#include "model/model.hpp"
#include "parallel/pipeline/stage_model.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/tensor_parallel/tp_plan.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace accel {

struct LlamaLayer;

// Keys and values (after the rotary embedding, before repeat_kv) of the positions seen so far, one
// [B, num_key_value_heads, T, head_dim] pair per decoder layer.
using LlamaKvCache = KvCache;

namespace parallel::cp {
struct ContextParallel;
}

class LlamaModel final : public Model, public parallel::tp::TensorParallelModel, public parallel::pp::PipelineStageModel {
public:
    // `on_parameter` (optional): called with each parameter tensor right after it is made (model.hpp).
    explicit LlamaModel(const config::LlamaConfig &config, const ParameterFn &on_parameter = {});
    ~LlamaModel() override;

    // input_ids [B, T] (or [T]) int64/int32 -> logits [B, T, vocab_size] (or [T, vocab_size]).
    at::Tensor forward(const at::Tensor &input) override;
    // Incremental decoding: `input` [B, T] holds the tokens after the cached ones; the cache grows by T.
    // Runs without dropout and without checkpointing (generation).
    at::Tensor forward_cached(const at::Tensor &input, LlamaKvCache &cache);

    void train(bool on) override { training_ = on; }
    bool is_training() const override { return training_; }
    std::vector<ModuleUnit> units() const override;
    // Layer 0 is everything outside the decoder layers (embeddings, final norm, head: it spans the whole forward),
    // layers 1..num_hidden_layers are the decoder layers, typed by transformers' class name ("LlamaDecoderLayer",
    // "MistralDecoderLayer", "Qwen2DecoderLayer") so that FSDP's transformer_layer_cls_to_wrap reads as in Python.
    std::vector<std::string> layer_types() const override;
    std::vector<size_t> parameter_layers() const override;
    // Decoder layers only: layer 0 spans the whole forward and is never recomputed.
    void set_activation_checkpointing(const std::vector<bool> &layers) override;
    // recompute_granularity "selective" turned on or off after the model was built (MegatronLMPlugin's
    // recompute_activation, applied at prepare): the same as building it with that spec.
    void set_selective_recompute(bool on);
    bool activation_checkpointing() const override;
    // Per decoder layer: self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj (lm_head is not a slot).
    std::vector<LinearSlot> linear_slots() override;
    const config::LlamaConfig &config() const { return config_; }
    std::string hf_config_json() const override { return config::llama_config_to_hf_json(config_); }
    int64_t hidden_size() const override { return config_.hidden_size; }
    // Context parallelism (parallel/context_parallel/plan.hpp), as GptModel's: forward() takes this rank's part of
    // each sequence, the rotary embedding uses its whole-sequence positions, attention (sliding windows included,
    // under "allgather") runs over the whole sequence, the logits are marked for the whole-sequence loss.
    void apply_context_parallel(std::shared_ptr<const parallel::cp::ContextParallel> cp);
    const std::shared_ptr<const parallel::cp::ContextParallel> &context_parallel() const { return cp_; }
    // Tensor parallelism over `group` (transformers' base_model_tp_plan for Llama / Mistral / Qwen2, applied at
    // prepare by parallel/tensor_parallel/plan.hpp): q/k/v/gate/up column-wise (Qwen2's q/k/v biases split with
    // their rows), o/down row-wise, so each rank computes num_attention_heads / tp query heads and
    // num_key_value_heads / tp key/value heads (the grouped-query pairing stays within a rank); the token
    // embedding and the head (tied or not) vocabulary-parallel over the vocabulary padded to a multiple of tp,
    // as the gpt plan; RMSNorm weights replicated. forward() then returns this rank's vocabulary columns, marked
    // for the vocabulary-parallel cross-entropy. INVALID_ARGUMENT naming num_attention_heads,
    // num_key_value_heads or intermediate_size when it does not divide by the group's size. LoRA adapters are
    // split with their layers (plan_linear.hpp). The model's tp_plan overrides (set_tp_plan) may replicate an
    // attention or an MLP (parallel/tensor_parallel/tp_plan.hpp), named refusals for what cannot be.
    void apply_tensor_parallel(const std::shared_ptr<distributed::Communicator> &group) override;
    const std::map<std::string, parallel::tp::ParameterSlicing> &tensor_parallel_slicing() const override
    {
        return tp_slicing_;
    }
    const std::shared_ptr<distributed::Communicator> &tensor_parallel_group() const override { return tp_group_; }
    // This rank's generator for the split regions' dropout (its heads' attention dropout, a rowwise projection's
    // LoRA dropout; rng_tracker.hpp), as the gpt's; null until apply_tensor_parallel splits the model.
    std::shared_ptr<parallel::tp::DropoutGenerator> tensor_parallel_dropout() const override { return tp_dropout_; }
    // Megatron's sequence parallelism, as GptModel's (set before apply_tensor_parallel): the token embeddings are
    // scattered along the sequence, the RMSNorms and residual adds run on this rank's 1/tp of the positions (the
    // norms' weight gradients summed over tp), q/k/v and gate/up all-gather the sequence, o and down reduce-scatter
    // it, the head gathers it; the rotary embedding and the causal mask stay the whole sequence's. forward then
    // needs a sequence length dividing by tp and no key/value cache (INVALID_ARGUMENT / UNIMPLEMENTED named).
    void set_sequence_parallel(bool on) { sequence_parallel_ = on; }
    bool sequence_parallel() const override { return sequence_parallel_ && tp_group_ != nullptr; }
    // Pipeline parallelism (parallel/pipeline/, PipelineStageModel: stage_model.hpp), as GptModel's: the stage holds
    // its chunks' decoder layers, model.embed_tokens on the first stage, model.norm and lm_head on the last (the
    // token embedding there too when tied; the pipeline sums its gradient over the two); every other parameter is
    // emptied in place. A later stage takes the hidden states [B, T, hidden_size] (its 1/tp of the positions under
    // sequence parallelism) and computes the rotary embedding and the causal mask (sliding windows included) of the
    // whole sequence's positions. forward() and forward_cached() run the whole model through the pipeline.
    void apply_pipeline_stage(const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first, bool last) override;
    at::Tensor forward_stage(const at::Tensor &input, KvCache *cache) override;
    void mark_logits(const at::Tensor &logits) const override;
    Model &stage_model() override { return *this; }
    Shape pipeline_shape() const override;
    std::vector<int64_t> block_costs() const override;
    at::Tensor tied_embedding() const override { return config_.tie_word_embeddings ? embed_ : at::Tensor(); }

protected:
    std::string canonical_key(const std::string &key) const override;

private:
    at::Tensor run(const at::Tensor &input, LlamaKvCache *cache);
    at::Tensor embed(const at::Tensor &ids, bool sequence_parallel) const;
    // cos, sin [T, head_dim] for positions past .. past + T - 1, in `dtype`.
    std::pair<at::Tensor, at::Tensor> rotary(int64_t past, int64_t T, const at::Device &device, at::ScalarType dtype);
    config::LlamaConfig config_;
    at::Tensor embed_, norm_w_, lm_head_; // lm_head_ is embed_ when tied
    std::shared_ptr<Linear> lm_head_linear_;
    std::vector<std::shared_ptr<LlamaLayer>> layers_;
    bool training_ = true;
    std::vector<bool> checkpointed_; // per decoder layer
    // transformers' dynamic_rope_update: the longest sequence seen (dynamic rope_scaling only).
    int64_t rope_seq_len_ = 0;
    struct RotaryCache {
        int64_t past = 0, T = 0, seq_len = 0;
        at::Tensor cos, sin;
    } rotary_cache_;
    std::shared_ptr<const parallel::cp::ContextParallel> cp_; // set by apply_context_parallel
    std::vector<parallel::tp::PlanModule> plan_modules() const; // the built-in plan, for the tp_plan overrides
    std::shared_ptr<distributed::Communicator> tp_group_;     // set by apply_tensor_parallel
    int64_t vocab_start_ = 0;                                 // this rank's first vocabulary row under it
    bool sequence_parallel_ = false;                          // set_sequence_parallel
    std::shared_ptr<parallel::tp::DropoutGenerator> tp_dropout_; // this tp rank's, for the split regions' dropout
    std::map<std::string, parallel::tp::ParameterSlicing> tp_slicing_;
};

} // namespace accel
