// Typed form of {"type": "gpt", ...}: Hugging Face's GPT2Config keys, with its defaults.
#pragma once

#include <cstdint>
#include <string>

namespace accel::config {

class JsonObject;

struct GptConfig {
    int64_t vocab_size = 50257;
    int64_t n_positions = 1024;
    int64_t n_embd = 768;
    int64_t n_layer = 12;
    int64_t n_head = 12;
    int64_t n_inner = 0; // 0: HF's null, i.e. 4 * n_embd
    std::string activation_function = "gelu_new";
    double resid_pdrop = 0.1;
    double embd_pdrop = 0.1;
    double attn_pdrop = 0.1;
    double layer_norm_epsilon = 1e-5;
    double initializer_range = 0.02;
    bool scale_attn_weights = true;
    bool scale_attn_by_inverse_layer_idx = false;
    bool tie_word_embeddings = true;
    // accel's own key: recompute each gpt_block's activations in backward instead of keeping them.
    bool activation_checkpointing = false;
    // Megatron-LM's recompute_granularity: "full" is activation_checkpointing; "selective" keeps every activation
    // but the attention core's (q kᵀ, softmax, dropout, · v: the [B, heads, T, T] tensors), recomputed in backward.
    bool selective_recompute = false;

    int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
};

// Reads every key of `root` (an object whose "type" was already read as "gpt") and finishes it.
GptConfig parse_gpt_config(JsonObject &root);
// The config as HF's config.json (model_type "gpt2", architectures ["GPT2LMHeadModel"]).
std::string gpt_config_to_hf_json(const GptConfig &c);

} // namespace accel::config
