// Accelerate's device_map as a typed value: {"model.layers.0": 0, ..., "lm_head": "cpu", "model.norm": "disk"}.
// Parsed and written here (src/config/ is where JSON is read); src/big_modeling/device_map.hpp adds what needs a
// model (coverage check, lookup of a tensor's device).
#pragma once

#include <cstdint>
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

} // namespace accel::config
