// The Llama family ({"type": "llama"}: Llama, Mistral, Qwen2), computed as transformers' LlamaForCausalLM /
// MistralForCausalLM / Qwen2ForCausalLM compute it (eager attention), with their parameter names and shapes
// (model.embed_tokens.weight, model.layers.<i>.self_attn.q_proj.weight, ..., lm_head.weight). Every projection
// goes through the linear seam (model/linear.hpp), listed by linear_slots().
#pragma once

#include "config/llama_config.hpp"
#include "model/linear.hpp"
#include "model/model.hpp"

#include <memory>
#include <vector>

namespace accel {

struct LlamaLayer;

// Keys and values (after the rotary embedding, before repeat_kv) of the positions seen so far, one
// [B, num_key_value_heads, T, head_dim] pair per decoder layer.
struct LlamaKvCache {
    std::vector<at::Tensor> keys, values;
    int64_t length() const { return keys.empty() || !keys.front().defined() ? 0 : keys.front().size(2); }
};

namespace parallel::cp {
struct ContextParallel;
}

class LlamaModel final : public Model {
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

protected:
    std::string canonical_key(const std::string &key) const override;

private:
    at::Tensor run(const at::Tensor &input, LlamaKvCache *cache);
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
};

} // namespace accel
