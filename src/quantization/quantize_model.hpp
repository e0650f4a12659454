// Accelerate's replace_with_bnb_layers / load_and_quantize_model for a model in memory: every linear layer of the
// linear seam (Model::linear_slots) that is not skipped is replaced in place by a 4-bit or 8-bit layer
// (bnb_linear.hpp). Its weight parameter keeps its name and tensor object but now holds the quantized values
// (bitsandbytes' `weight`), frozen; the quantization state is registered as buffers under the names
// bitsandbytes and transformers write (`SCB`; `weight.absmax`, `weight.quant_map`, `weight.nested_absmax`,
// `weight.nested_quant_map`, `weight.quant_state.bitsandbytes__<type>`).
#pragma once

#include "config/bnb_quantization_config.hpp"
#include "model/model.hpp"

#include <string>
#include <vector>

namespace accel {

// The modules Accelerate leaves in full precision when skip_modules is not given (get_keys_to_not_convert):
// modules whose weight is tied to another parameter, and the model's last top-level child ("lm_head" for
// Hugging Face causal LMs; for a model built from a spec, the top-level name of its last parameter).
std::vector<std::string> keys_to_not_convert(Model &model);

// Quantizes `model` in place; returns the modules converted, in forward order. A layer with LoRA adapters has its
// base quantized under them (QLoRA: the adapters train over the quantized base). FAILED_PRECONDITION once the model
// is prepared or is quantized already; UNIMPLEMENTED for a model without
// linear layers accel can replace (TorchScript), or fp16 compute on the CPU (LibTorch 1.13 has no float16 matmul
// there); INVALID_ARGUMENT when nothing is left to quantize.
std::vector<std::string> quantize_model(Model &model, const config::BnbQuantizationConfig &config);

// Whether the model has a quantized layer.
bool is_quantized(Model &model);

} // namespace accel
