// Typed form of a model spec's "lora" object: PEFT's LoraConfig keys that change training (r, lora_alpha,
// lora_dropout, target_modules, bias, use_rslora), read strictly (other keys refused by name), and the
// adapter_config.json that PEFT writes beside adapter_model.safetensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

class JsonObject;

struct LoraConfig {
    int64_t r = 8;
    double lora_alpha = 8.0;
    double lora_dropout = 0.0;
    // PEFT's target_modules: a list of module names, each matching a module whose path is it or ends with
    // "." + it; or one string: "all-linear" (all_linear) or a regular expression the whole path must match.
    // None given (targets_given false): PEFT's default for the model type (default_lora_targets).
    std::vector<std::string> target_modules;
    std::optional<std::string> target_regex;
    bool all_linear = false;
    bool targets_given = false;
    std::string bias = "none"; // "none", "all" (every bias trains), "lora_only" (the adapted layers' biases)
    bool use_rslora = false;

    // PEFT's LoraLayer.update_layer: lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora (rank-stabilized).
    double scaling() const;
};

// Parses the object at `o` (its path names the keys in messages) and finishes it.
LoraConfig parse_lora_config(JsonObject &o);

// A PEFT adapter_config.json's text (`what` names the file in messages): peft_type must be "LORA"; the keys above
// are read; PEFT's bookkeeping keys (task_type, base_model_name_or_path, inference_mode, fan_in_fan_out, ...) are
// ignored; any other key must hold its default (null, false, {} or []), else ACCEL_ERR_UNIMPLEMENTED naming it
// (use_dora, modules_to_save, rank_pattern, ...: features accel does not build).
LoraConfig parse_peft_adapter_config(const std::string &text, const std::string &what);

// PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for the model_type in a Hugging Face config.json
// text (gpt2: c_attn; llama, mistral, qwen2: q_proj, v_proj); empty when the type has none or there is no config.
std::vector<std::string> default_lora_targets(const std::string &hf_config_json);

// adapter_config.json as PEFT writes it (peft_type "LORA", the keys above, fan_in_fan_out for Conv1D layers).
// `targets`: the target_modules value to record (the given list, or the defaults used).
std::string lora_config_to_peft_json(const LoraConfig &c, const std::vector<std::string> &targets, bool fan_in_fan_out,
                                     const std::string &task_type, const std::string &base_model_name_or_path);

} // namespace accel::config
