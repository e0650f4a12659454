// Options of save_state / load_state / save_model / load_checkpoint, parsed from their JSON argument.
#pragma once

#include <accel/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace accel::config {

struct SaveStateOptions {
    bool safe_serialization = true; // model weights as model.safetensors (else pytorch_model.bin)
    bool async_save = false;        // "async": stage the state, write it on a background thread
};

struct LoadStateOptions {
    bool strict = true;              // model weights must match the model's state dict exactly
    std::string map_location = "cpu"; // "cpu" or "on_device" (the same on this CPU build)
};

struct SaveModelOptions {
    uint64_t max_shard_size = 10000000000ULL; // "10GB"
    bool safe_serialization = true;
    // save_pretrained's LoRA options (parse_save_pretrained_options; save_model's parser leaves them false):
    bool adapter_only = false; // PEFT's adapter folder only (adapter_model.safetensors + adapter_config.json)
    bool merge = false;        // the adapters merged into the base weights, under the base model's names
};

// get_state_dict (Accelerate's accelerator.get_state_dict(model, unwrap)).
struct GetStateDictOptions {
    // false: the keys as the wrapped module names them (DDP's "module." prefix); true: the model's own keys.
    bool unwrap = true;
    // Whether only process 0 receives the tensors (the others an empty dict). nullopt: Accelerate's choice,
    // true for a model sharded by fsdp_plugin (FullStateDictConfig(rank0_only=True)) or ZeRO-3, else false.
    std::optional<bool> rank0_only;
};

struct MergeWeightsOptions {
    bool safe_serialization = true;     // model.safetensors (else pytorch_model.bin)
    bool remove_checkpoint_dir = false; // delete the input once the output is written
};

struct LoadCheckpointOptions {
    bool strict = false;
    std::optional<accel_dtype_t> dtype; // floating-point tensors are converted to it first
};

class JsonObject;
// A torch dtype under `key` ("float32", "torch.bfloat16", "half", ...; floating types only), or nullopt when
// absent.
std::optional<accel_dtype_t> get_dtype(JsonObject &o, const char *key);

// NULL = defaults. `what` names the argument in messages ("options_json").
SaveStateOptions parse_save_state_options(const char *json, const char *what);
LoadStateOptions parse_load_state_options(const char *json, const char *what);
SaveModelOptions parse_save_model_options(const char *json, const char *what);
LoadCheckpointOptions parse_load_checkpoint_options(const char *json, const char *what);
MergeWeightsOptions parse_merge_weights_options(const char *json, const char *what);
GetStateDictOptions parse_get_state_dict_options(const char *json, const char *what);

// "5GB", "200MB", "10KB", "1TB" (decimal units, case-insensitive, as huggingface_hub), "2GiB", "512MiB", "64KiB"
// (binary units, as Accelerate's convert_file_size_to_int) or a number of bytes; `where` names the value in the
// message.
uint64_t parse_size_text(const std::string &text, const std::string &where);

} // namespace accel::config
