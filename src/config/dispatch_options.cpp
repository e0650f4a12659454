#include "config/dispatch_options.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <memory>

namespace accel::config {

namespace {

// The keys both entry points share.
DispatchOptions read_dispatch(JsonObject &o, bool dispatch_names)
{
    DispatchOptions d;
    auto dir = o.get_optional_string("offload_dir");
    auto folder = o.get_optional_string("offload_folder");
    if (dir && folder) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("offload_folder") + ": give offload_dir or offload_folder, not both");
    d.offload_dir = dir ? *dir : folder ? *folder : std::string();
    d.offload_buffers = o.get_bool("offload_buffers", false);
    if (dispatch_names) d.force_hooks = o.get_bool("force_hooks", false);
    const std::string main = o.get_string(dispatch_names ? "main_device" : "execution_device", "cpu");
    if (main != "cpu")
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of(dispatch_names ? "main_device" : "execution_device") + ": \"" + main +
                                          "\": dispatching onto a GPU is not built yet; the execution device is the CPU");
    return d;
}

} // namespace

DispatchOptions parse_dispatch_options(const char *json, const std::string &what)
{
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject o(doc.root(), "");
    DispatchOptions d = read_dispatch(o, true);
    o.finish();
    return d;
}

LoadAndDispatchOptions parse_load_and_dispatch_options(const char *json, const std::string &what)
{
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject o(doc.root(), "");
    LoadAndDispatchOptions l;
    l.dispatch = read_dispatch(o, false);
    l.load.strict = o.get_bool("strict", false);
    l.load.dtype = get_dtype(o, "dtype");
    const cJSON *max_memory = o.get_raw("max_memory");
    const cJSON *no_split = o.get_raw("no_split_module_classes");
    const cJSON *map = o.get_raw("device_map");
    if (map != nullptr && cJSON_IsString(map)) {
        // load_checkpoint_and_dispatch's strategies: every one but "sequential" balances the budgets first.
        const std::string strategy = o.get_enum("device_map", "", {"auto", "balanced", "balanced_low_0", "sequential"});
        std::unique_ptr<cJSON, void (*)(cJSON *)> infer(cJSON_CreateObject(), cJSON_Delete);
        auto add = [&](const char *key, const cJSON *v) {
            if (v != nullptr) cJSON_AddItemToObject(infer.get(), key, cJSON_Duplicate(v, true));
        };
        add("max_memory", max_memory);
        add("no_split_module_classes", no_split);
        add("dtype", o.get_raw("dtype"));
        cJSON_AddBoolToObject(infer.get(), "balanced", strategy != "sequential");
        cJSON_AddBoolToObject(infer.get(), "low_zero", strategy == "balanced_low_0");
        std::unique_ptr<char, void (*)(void *)> text(cJSON_PrintUnformatted(infer.get()), cJSON_free);
        if (!text) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, o.path_of("device_map") + ": out of memory");
        l.infer = parse_infer_device_map_options(text.get(), what);
    } else {
        if (max_memory != nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("max_memory") + ": only with a device_map strategy name (\"auto\", ...)");
        if (no_split != nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT,
                 o.path_of("no_split_module_classes") + ": only with a device_map strategy name (\"auto\", ...)");
        if (map != nullptr) {
            std::unique_ptr<char, void (*)(void *)> text(cJSON_PrintUnformatted(map), cJSON_free);
            if (!text) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, o.path_of("device_map") + ": out of memory");
            l.device_map = parse_device_map(text.get(), what + ": device_map");
        }
    }
    // Accelerate's offload_state_dict (park the CPU part of the state dict on disk while loading) changes only
    // the peak memory of loading, not the result: accel loads tensor by tensor into the model.
    o.get_bool("offload_state_dict", false);
    o.finish();
    return l;
}

} // namespace accel::config
