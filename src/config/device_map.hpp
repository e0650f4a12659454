// Accelerate's device_map as a typed value: {"model.layers.0": 0, ..., "lm_head": "cpu", "model.norm": "disk"}.
// Parsed and written here (src/config/ is where JSON is read); src/big_modeling/device_map.hpp adds what needs a
// model (coverage check, lookup of a tensor's device).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::config {

// Where a module's weights live: an accelerator index (Accelerate's int keys), the CPU, or the offload folder.
struct DeviceTarget {
    enum class Kind { gpu, cpu, disk };
    Kind kind = Kind::cpu;
    int32_t index = 0; // the GPU's index (kind gpu only)

    static DeviceTarget gpu(int32_t i) { return {Kind::gpu, i}; }
    static DeviceTarget cpu() { return {Kind::cpu, 0}; }
    static DeviceTarget disk() { return {Kind::disk, 0}; }
    bool operator==(const DeviceTarget &o) const { return kind == o.kind && (kind != Kind::gpu || index == o.index); }
    bool operator!=(const DeviceTarget &o) const { return !(*this == o); }
    // "0", "cpu", "disk": a max_memory key's spelling and messages' wording.
    std::string str() const;
};

// Module name ("" = the whole model) -> target, in the JSON's order (Accelerate's dicts keep insertion order, and
// so does its inferred map: modules in forward order). Names are unique.
using DeviceMap = std::vector<std::pair<std::string, DeviceTarget>>;

// Parses a JSON object of module name -> 0.. (GPU index), "cpu", "disk", "cuda" / "cuda:N" (torch.device's text for a
// GPU). ACCEL_ERR_INVALID_ARGUMENT naming `what` and the key on anything else (a non-object, a duplicate name, a
// negative index, another device such as "mps" or "meta").
DeviceMap parse_device_map(const char *json, const std::string &what);
// The JSON object Accelerate writes: GPU indexes as numbers, "cpu" / "disk" as strings, in the map's order.
std::string device_map_to_json(const DeviceMap &map);

// Accelerate's convert_file_size_to_int: "5GB" (10^9), "5GiB" (2^30), likewise MB/MiB/KB/KiB; a lower-case final
// "b" ("5Gb") means bits (divided by 8). Bytes > 0, else ACCEL_ERR_INVALID_ARGUMENT naming `where`.
int64_t convert_file_size_to_int(const std::string &size, const std::string &where);

// A device's memory budget, in get_max_memory's order: GPUs by index, then "cpu", then "disk".
using MaxMemory = std::vector<std::pair<DeviceTarget, int64_t>>;

// Options of infer_auto_device_map (accel_model_infer_auto_device_map), Accelerate's arguments by name:
//   {"max_memory": {"0": "10GiB", "cpu": 2000000, "disk": ...}, "no_split_module_classes": ["LlamaDecoderLayer"],
//    "dtype": "float16", "balanced": false, "low_zero": false}
// "balanced" runs get_balanced_memory first (transformers' device_map="auto"/"balanced"), "low_zero" with it is
// device_map="balanced_low_0". Unknown keys, devices other than GPU indexes / "cpu" / "disk", negative budgets are
// refused by name.
struct InferDeviceMapOptions {
    std::optional<MaxMemory> max_memory; // nullopt: what is free (get_max_memory(None))
    std::vector<std::string> no_split_module_classes;
    std::optional<int32_t> dtype_bits; // bits of one element of `dtype` (bool: 1)
    bool balanced = false;
    bool low_zero = false;
};
InferDeviceMapOptions parse_infer_device_map_options(const char *json, const std::string &what);
// Options of compute_module_sizes (accel_model_compute_module_sizes): "dtype", "no_split_module_classes".
struct ModuleSizesOptions {
    std::optional<int32_t> dtype_bits;
    std::vector<std::string> no_split_module_classes;
};
ModuleSizesOptions parse_module_sizes_options(const char *json, const std::string &what);
// accel_model_compute_module_sizes' answer: {"sizes": {name: bytes, ...}, "max_layer_size": n, "max_layer_names": [...]}.
std::string module_sizes_to_json(const std::vector<std::pair<std::string, int64_t>> &sizes, int64_t max_layer_size,
                                 const std::vector<std::string> &max_layer_names);
// {"0": bytes, ..., "cpu": bytes, "disk": bytes} (get_balanced_memory's answer).
std::string max_memory_to_json(const MaxMemory &m);

} // namespace accel::config
