// LoRA adapters on a model (PEFT's get_peft_model for LoraConfig): the model's linear slots whose module paths
// match target_modules get a LoraLinear; every other parameter is frozen (requires_grad false) but the biases
// that `bias` trains. Adapters are ordinary parameters named "<module>.lora_A.weight" / ".lora_B.weight",
// registered right after their base layer's, so optimizers, DDP, sharding, save_state and save_model see them
// as any other; PEFT's names ("base_model.model.<module>.lora_A.weight") appear only in adapter files.
#pragma once

#include "config/lora_config.hpp"
#include "model/model.hpp"

#include <set>
#include <string>

namespace accel {

// Adapts `model` in place. Before it is prepared or lent out (FAILED_PRECONDITION otherwise); INVALID_ARGUMENT
// when target_modules match none of its linear layers (naming them); UNIMPLEMENTED for a model without linear
// slots (TorchScript). Returns how many layers were adapted. `on_parameter` (optional) is called with each adapter
// as it is made, as make_model_from_json's (zero3_init_flag partitions them there, with rank 0's values).
size_t apply_lora(Model &model, const config::LoraConfig &config, const ParameterFn &on_parameter = {});

// Whether apply_lora adapted the model.
bool has_lora(const Model &model);
// The adapters' parameter names ("<module>.lora_A.weight", ...): new tensors that no base checkpoint holds
// (from_pretrained does not count them as missing).
std::set<std::string> adapter_parameter_names(const Model &model);

struct AdapterSaveOptions {
    std::string base_model_name_or_path; // adapter_config.json's field ("" writes null)
    // The model's state dict by accel names, gathered (a sharded model's full tensors); null: the model's own.
    const NamedTensors *state = nullptr;
};

// PEFT's PeftModel.from_pretrained(model, dir): `dir`/adapter_config.json's LoRA settings applied to `model` (which
// has no adapters yet; FAILED_PRECONDITION otherwise) and `dir`/adapter_model.safetensors's tensors, under PEFT's
// names, loaded into them. Every adapter must be in the file and every tensor in the file must be the model's
// (INVALID_ARGUMENT naming it; the model is then unusable). NOT_FOUND without those files.
void load_adapter(Model &model, const std::string &dir);

// PEFT's save_pretrained of a LoRA model: `dir`/adapter_model.safetensors (the adapters, and the trained biases
// with bias "all"/"lora_only", under PEFT's key names; metadata format "pt") and `dir`/adapter_config.json.
// Creates `dir`. FAILED_PRECONDITION when the model has no adapters.
void save_adapter(const Model &model, const std::string &dir, const AdapterSaveOptions &options = {});

// The model's weights with the adapters merged in (PEFT's merge_and_unload): each adapted weight is
// W + scaling * B A, in W's dtype; adapter entries left out; names are the base model's (no lora).
// `state`: as AdapterSaveOptions::state. Shared tensors listed once (as state_dict(true)).
NamedTensors merged_state_dict(const Model &model, const NamedTensors *state = nullptr);

} // namespace accel
