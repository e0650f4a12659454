// from_pretrained / save_pretrained: their options, and a Hugging Face config.json turned into accel's
// JSON model spec (transformers' config classes map onto the spec's "gpt" and "llama" types by key name).
#pragma once

#include "config/checkpoint_options.hpp"

#include <accel/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::config {

struct FromPretrainedOptions {
    // Missing or unexpected tensors are errors naming the tensor and its file (false: listed in the report).
    bool strict = true;
    // transformers' torch_dtype: nullopt ("auto" or absent) keeps the dtype the weights are stored in.
    std::optional<accel_dtype_t> torch_dtype;
    // Model options handed on into the spec as they are ("frozen", "lora"): key and JSON text.
    std::vector<std::pair<std::string, std::string>> model_options;
    // A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) to put on the loaded model
    // (PeftModel.from_pretrained(model, adapter)); "" for none.
    std::string adapter;
    // "empty_init" (also handed on into the spec): the model of config.json on the meta device, no weights read
    // (Accelerate's `with init_empty_weights(): AutoModel.from_config(config)`).
    bool empty_init = false;
};
FromPretrainedOptions parse_from_pretrained_options(const char *json, const char *what);

struct SavePretrainedOptions {
    SaveModelOptions weights; // max_shard_size, safe_serialization (save_model's), adapter_only, merge
};
SavePretrainedOptions parse_save_pretrained_options(const char *json, const char *what);

// The JSON model spec for config.json's text: model_type "gpt2" -> {"type": "gpt", GPT2Config's keys},
// "llama" / "mistral" / "qwen2" -> {"type": "llama", the config's keys}; any other model_type is
// UNIMPLEMENTED naming it. Keys transformers keeps for other purposes (token ids, architectures, versions,
// use_cache, ...) are dropped for gpt2; the spec parser refuses the rest by name. `model_options` are added.
// `what` names the file in messages.
std::string spec_from_hf_config(const std::string &config_text, const std::string &what,
                                const std::vector<std::pair<std::string, std::string>> &model_options);

// `config_json` (a model's hf_config_json) with "torch_dtype": `dtype` ("float32", "bfloat16", ...).
std::string hf_config_with_dtype(const std::string &config_json, const std::string &dtype);

} // namespace accel::config
