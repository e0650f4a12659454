// Typed options of accel_model_dispatch (Accelerate's dispatch_model arguments) and
// accel_model_load_checkpoint_and_dispatch (load_checkpoint_and_dispatch's).
#pragma once

#include "config/checkpoint_options.hpp"
#include "config/device_map.hpp"

#include <optional>
#include <string>

namespace accel::config {

struct DispatchOptions {
    std::string offload_dir;      // "offload_dir" (dispatch_model's name) or "offload_folder"; "" = none
    bool offload_buffers = false; // buffers of disk modules offloaded with the parameters
    bool force_hooks = false;     // hooks even when every module is on one device
};

struct LoadAndDispatchOptions {
    DispatchOptions dispatch;
    std::optional<DeviceMap> device_map; // absent (and no strategy): load only, as Accelerate with device_map=None
    // A strategy name ("auto", "balanced", "balanced_low_0", "sequential"): the map infer_auto_device_map computes
    // with these options (max_memory, no_split_module_classes, dtype), before loading, as Accelerate does.
    std::optional<InferDeviceMapOptions> infer;
    LoadCheckpointOptions load;          // strict (default false, as Accelerate's) and dtype
};

// "main_device" other than "cpu" is ACCEL_ERR_UNIMPLEMENTED (no GPU dispatch yet); unknown keys INVALID_ARGUMENT.
DispatchOptions parse_dispatch_options(const char *json, const std::string &what);
// device_map: an object (Accelerate's JSON) or a strategy name; strict and dtype as accel_model_load_checkpoint's
// options; max_memory and no_split_module_classes (with a strategy only) as accel_model_infer_auto_device_map's.
LoadAndDispatchOptions parse_load_and_dispatch_options(const char *json, const std::string &what);

} // namespace accel::config
