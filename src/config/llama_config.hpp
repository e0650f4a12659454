// Typed form of {"type": "llama", ...}: the keys of transformers' LlamaConfig / MistralConfig / Qwen2Config by their
// Hugging Face names, with the defaults of the config class that "model_type" names (llama when absent), so that a
// model's config.json with "type": "llama" added is a valid spec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace accel::config {

class JsonObject;

// config.rope_scaling (transformers' modeling_rope_utils): "linear", "dynamic" (NTK) or "llama3"; "default" or
// null: none.
struct RopeScaling {
    std::string type = "default";
    double factor = 1.0;
    // llama3 only
    double low_freq_factor = 1.0, high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 0;
};

struct LlamaConfig {
    std::string model_type = "llama"; // llama, mistral, qwen2: decides the defaults, biases and sliding windows
    int64_t vocab_size = 32000;
    int64_t hidden_size = 4096;
    int64_t intermediate_size = 11008;
    int64_t num_hidden_layers = 32;
    int64_t num_attention_heads = 32;
    int64_t num_key_value_heads = 32; // HF's null: num_attention_heads
    int64_t head_dim = 128;           // HF's null: hidden_size / num_attention_heads
    std::string hidden_act = "silu";
    int64_t max_position_embeddings = 2048;
    double initializer_range = 0.02;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    bool attention_bias = false; // llama: biases on q/k/v/o; qwen2 always has q/k/v biases (and none on o)
    double attention_dropout = 0.0;
    bool mlp_bias = false;
    bool tie_word_embeddings = false;
    std::optional<int64_t> pad_token_id; // nn.Embedding's padding_idx: that row starts at zero and gets no gradient
    // Mistral: every layer; Qwen2: layers >= max_window_layers when use_sliding_window. A query sees the keys less
    // than sliding_window positions before it.
    std::optional<int64_t> sliding_window;
    bool use_sliding_window = false;
    int64_t max_window_layers = 28;
    // accel's own key, as the gpt spec's: recompute each decoder layer's activations in backward.
    bool activation_checkpointing = false;
    // Megatron-LM's recompute_granularity: "full" is activation_checkpointing; "selective" keeps every activation
    // but the attention core's (q kᵀ, softmax, dropout, · v: the [B, heads, T, T] tensors), recomputed in backward.
    bool selective_recompute = false;

    bool qkv_bias() const { return model_type == "qwen2" || (model_type == "llama" && attention_bias); }
    bool o_bias() const { return model_type == "llama" && attention_bias; }
    // The sliding window of decoder layer `layer` (0: full causal attention).
    int64_t window(int64_t layer) const;
};

// Reads every key of `root` (an object whose "type" was already read as "llama") and finishes it: unknown keys are
// refused by name, keys that change nothing in training (torch_dtype, architectures, token ids other than
// pad_token_id, use_cache, ...) are accepted.
LlamaConfig parse_llama_config(JsonObject &root);
// The config as transformers' config.json (model_type and architectures of its family).
std::string llama_config_to_hf_json(const LlamaConfig &c);

} // namespace accel::config
