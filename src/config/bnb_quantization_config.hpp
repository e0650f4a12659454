// Typed form of Accelerate's BnbQuantizationConfig (utils/dataclasses.py; precision-and-quantization.md §4.1),
// read strictly from JSON (unknown keys refused by name), and the JSON that bitsandbytes packs into a 4-bit
// layer's "weight.quant_state.bitsandbytes__<type>" tensor (QuantState.as_dict(packed=True)).
#pragma once

#include "config/dispatch_options.hpp"

#include <accel/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

struct BnbQuantizationConfig {
    bool load_in_8bit = false;
    bool load_in_4bit = false;
    double llm_int8_threshold = 6.0;
    std::string bnb_4bit_quant_type = "fp4";     // "fp4" or "nf4"
    bool bnb_4bit_use_double_quant = false;
    std::string bnb_4bit_compute_dtype = "fp16"; // "fp32", "fp16" or "bf16" (Accelerate's spellings)
    // Module names not converted (Accelerate's rule: a module whose name equals an entry, or contains
    // entry + "."). None given: Accelerate's automatic choice (tied-weight modules and the last top-level child).
    std::vector<std::string> skip_modules;
    bool skip_modules_given = false;
    std::vector<std::string> keep_in_fp32_modules;
    // load_and_quantize_model's weights_location (an argument there, a key of accel_model_quantize's JSON here):
    // a float checkpoint file or folder to load while quantizing; "" for none.
    std::string weights_location;
    // load_and_quantize_model's torch_dtype: the dtype of the floating-point tensors that are not quantized
    // (norms, embeddings, the head; not keep_in_fp32_modules), applied before quantizing, as transformers loads
    // in torch_dtype first. nullopt: they keep the model's dtype.
    std::optional<accel_dtype_t> torch_dtype;
    // load_and_quantize_model's device_map / max_memory / no_split_module_classes / offload_folder /
    // offload_state_dict (keys of the same JSON, with weights_location only), as load_checkpoint_and_dispatch
    // reads them. nullopt when none is given: the model stays whole in memory.
    std::optional<LoadAndDispatchOptions> placement;
};

// `text` is the JSON object; `what` names the argument in messages. ACCEL_ERR_INVALID_ARGUMENT for a bad or unknown
// key, or when not exactly one of load_in_8bit / load_in_4bit is true (Accelerate's ValueErrors);
// ACCEL_ERR_UNIMPLEMENTED for torch_dtype "float16" (LibTorch 1.13 has no float16 matmul on the CPU); the placement
// keys without weights_location are INVALID_ARGUMENT (Accelerate places only a model it loads).
BnbQuantizationConfig parse_bnb_quantization_config(const char *text, const std::string &what);

// transformers' BitsAndBytesConfig as a pre-quantized folder's config.json holds it under "quantization_config"
// (its to_dict keys: load_in_4bit / _load_in_4bit, bnb_4bit_*, llm_int8_*, quant_method). `config_json` is the
// whole config.json text, `what` its path. nullopt when there is no quantization_config. UNIMPLEMENTED naming
// quant_method for methods other than "bitsandbytes" (gptq, awq, ...), and for llm_int8_has_fp16_weight or a
// bnb_4bit_quant_storage other than uint8; INVALID_ARGUMENT naming a bad or unknown key.
std::optional<BnbQuantizationConfig> parse_hf_quantization_config(const std::string &config_json,
                                                                  const std::string &what);
// `config_json` with "quantization_config" set to what transformers writes for `c` (llm_int8_skip_modules:
// c.skip_modules, the modules left in full precision, so that loading needs no rule to find them again), or
// removed when `c` is null.
std::string hf_config_with_quantization(const std::string &config_json, const BnbQuantizationConfig *c);

// bitsandbytes' packed non-tensor part of a 4-bit QuantState.
struct QuantStateMeta {
    std::string quant_type;       // "fp4" / "nf4"
    int64_t blocksize = 64;
    std::string dtype;            // "float32", "float16", "bfloat16"
    std::vector<int64_t> shape;
    bool nested = false;
    int64_t nested_blocksize = 256;
    std::string nested_dtype = "float32";
    double nested_offset = 0.0;
};
// Parses the bytes of the quant_state tensor (`what` names it); INVALID_ARGUMENT naming a bad or missing key.
QuantStateMeta parse_quant_state_meta(const std::string &text, const std::string &what);
// The JSON as bitsandbytes writes it (its keys, in its order).
std::string quant_state_meta_json(const QuantStateMeta &meta);

} // namespace accel::config
