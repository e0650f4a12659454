// Accelerate's replace_with_bnb_layers / load_and_quantize_model for a model in memory: every linear layer of the
// linear seam (Model::linear_slots) that is not skipped is replaced in place by a 4-bit or 8-bit layer
// (bnb_linear.hpp). Its weight parameter keeps its name and tensor object but now holds the quantized values
// (bitsandbytes' `weight`), frozen; the quantization state is registered as buffers under the names
// bitsandbytes and transformers write (`SCB`; `weight.absmax`, `weight.quant_map`, `weight.nested_absmax`,
// `weight.nested_quant_map`, `weight.quant_state.bitsandbytes__<type>`).
#pragma once

#include "config/bnb_quantization_config.hpp"
#include "model/model.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace accel {

// The modules Accelerate leaves in full precision when skip_modules is not given (get_keys_to_not_convert):
// modules whose weight is tied to another parameter, and the model's last top-level child ("lm_head" for
// Hugging Face causal LMs; for a model built from a spec, the top-level name of its last parameter).
std::vector<std::string> keys_to_not_convert(Model &model);

// Quantizes `model` in place; returns the modules converted, in forward order. Layers whose weight is on the meta
// device (empty init) become quantized layers on meta (the shapes and dtypes bitsandbytes stores), to be given
// values by loading a quantized checkpoint. A layer with LoRA adapters has its
// base quantized under them (QLoRA: the adapters train over the quantized base). FAILED_PRECONDITION once the model
// is prepared or is quantized already; UNIMPLEMENTED for a model without
// linear layers accel can replace (TorchScript), or fp16 compute on the CPU (LibTorch 1.13 has no float16 matmul
// there); INVALID_ARGUMENT when nothing is left to quantize.
std::vector<std::string> quantize_model(Model &model, const config::BnbQuantizationConfig &config);

// Accelerate's load_and_quantize_model with weights_location (config.weights_location): the layers are replaced as
// quantize_model does (on meta for an empty model), and the float checkpoint (a file or folder) is loaded, each
// quantized layer's weight read and quantized one at a time, the other tensors copied into the model. A model
// tensor missing from the checkpoint, a checkpoint tensor the model lacks, or a weight of another shape:
// INVALID_ARGUMENT naming it.
std::vector<std::string> load_and_quantize_model(Model &model, const config::BnbQuantizationConfig &config);

// Whether the model has a quantized layer.
bool is_quantized(Model &model);

// What a quantized model's layers were quantized with, as save_pretrained writes it (config.json's
// "quantization_config"): skip_modules lists the linear layers left in full precision. nullopt when nothing is
// quantized.
std::optional<config::BnbQuantizationConfig> quantization_config_of(Model &model);

// Whether `name` is a quantization statistic (SCB, weight.absmax, weight.quant_map, weight.nested_*, the
// quant_state JSON): float32 whatever dtype the model is loaded in.
bool is_quant_state_name(const std::string &name);

// A pre-quantized folder's tensors as a quantized model holds them: each quant_state JSON padded to the model's
// length (bitsandbytes writes the length its text has); bitsandbytes' `weight_format` of an 8-bit layer checked
// (0, row-major: the only layout outside a GPU) and dropped. `file_of` names a tensor's file in messages.
void tensors_from_bnb_folder(NamedTensors &tensors, const std::function<std::string(const std::string &)> &file_of);
// Checks every quantized layer's state after loading (bnb::check_quantized_layer).
void check_quantized_layers(Model &model);

} // namespace accel
