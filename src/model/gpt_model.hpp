// A GPT-2 decoder ({"type": "gpt"}), computed as Hugging Face's GPT2LMHeadModel computes it, with its
// parameter names and shapes (Conv1D weights stored [in, out], lm_head tied to transformer.wte).
#pragma once

#include "config/gpt_config.hpp"
#include "model/linear.hpp"
#include "model/model.hpp"

#include <memory>
#include <vector>

namespace accel {

struct GptBlock;

// Keys and values of the positions seen so far, one [B, n_head, T, head_dim] pair per block.
struct GptKvCache {
    std::vector<at::Tensor> keys, values;
    int64_t length() const { return keys.empty() ? 0 : keys.front().size(2); }
};

class GptModel final : public Model {
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
    bool activation_checkpointing() const override;
    const config::GptConfig &config() const { return config_; }
    std::string hf_config_json() const override { return config::gpt_config_to_hf_json(config_); }
    int64_t hidden_size() const override { return config_.n_embd; } // GPT2Config.hidden_size is n_embd
    // Per block: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj (the tied lm_head is not a slot).
    std::vector<LinearSlot> linear_slots() override;

protected:
    std::string canonical_key(const std::string &key) const override;

private:
    at::Tensor run(const at::Tensor &input, GptKvCache *cache);
    config::GptConfig config_;
    at::Tensor wte_, wpe_, ln_f_w_, ln_f_b_, lm_head_; // lm_head_ is wte_ when tied
    std::shared_ptr<Linear> lm_head_linear_;             // over lm_head_
    std::vector<std::shared_ptr<GptBlock>> blocks_;
    bool training_ = true;
    std::vector<bool> checkpointed_; // per block
};

} // namespace accel
