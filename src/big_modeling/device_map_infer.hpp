// Accelerate 0.24.1's get_max_memory, get_balanced_memory, infer_auto_device_map and clean_device_map
// (accelerate/utils/modeling.py), over accel's module tree (module_sizes.hpp). tests/python/device_map_reference.py
// checks the maps against the real Accelerate on the same module trees.
#pragma once

#include "big_modeling/device_map.hpp"
#include "big_modeling/module_sizes.hpp"
#include "config/device_map.hpp"

namespace accel::big_modeling {

// get_max_memory: the given budgets in their order (GPUs, "cpu", "disk"), or without any, the memory this machine
// has available for the CPU (/proc/meminfo's MemAvailable, psutil's "available"). With a GPU visible and no
// budgets given: ACCEL_ERR_UNIMPLEMENTED (accel does not read free GPU memory; give max_memory).
config::MaxMemory get_max_memory(const std::optional<config::MaxMemory> &given);

// get_balanced_memory: budgets that spread the model evenly over the GPUs (each but the last capped at the model's
// size / #GPUs plus a buffer: the largest no-split layer or 1.25 x the mean leaf module). Without GPUs the budgets
// are returned as they are.
config::MaxMemory get_balanced_memory(const Model &model, const config::MaxMemory &max_memory,
                                      const std::vector<std::string> &no_split, std::optional<int32_t> dtype_bits,
                                      bool low_zero);

// infer_auto_device_map: modules in order fill each device up to its budget (the first GPU and the CPU keeping
// room for the largest layer still to place), a module that does not fit split into its children unless it has
// none or is of a no-split class, then the next device; "disk" takes the rest. Tied parameters go with the module
// that holds the other end. The map is cleaned (clean_device_map: a module whose parts all share a device is one
// entry).
DeviceMap infer_auto_device_map(const Model &model, const config::MaxMemory &max_memory,
                                const std::vector<std::string> &no_split, std::optional<int32_t> dtype_bits);

// What accel_model_infer_auto_device_map does with its options.
DeviceMap infer_auto_device_map(const Model &model, const config::InferDeviceMapOptions &options);

// clean_device_map (in place).
void clean_device_map(DeviceMap &map);

} // namespace accel::big_modeling
