#include <accel/dispatch.h>

#include "big_modeling/dispatch.hpp"
#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "config/dispatch_options.hpp"
#include "model/model.hpp"

using accel::fail;
using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_model_dispatch(accel_model_t *model, const char *device_map_json,
                                              const char *options_json) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        const char *map_json = checked_string(device_map_json, "device_map_json");
        const auto options = accel::config::parse_dispatch_options(options_json, "options_json");
        const auto map = accel::config::parse_device_map(map_json, "device_map_json");
        accel::big_modeling::dispatch_model(*m.impl, map, options);
    });
}

ACCEL_API accel_status_t accel_model_load_checkpoint_and_dispatch(accel_model_t *model, const char *checkpoint_path,
                                                                  const char *options_json) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        const char *path = checked_string(checkpoint_path, "checkpoint_path");
        if (path[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "checkpoint_path: must not be empty");
        const auto options = accel::config::parse_load_and_dispatch_options(options_json, "options_json");
        // Loading writes the values (an empty-init model is materialised by it); only hooks may refuse.
        if (m.impl->forward_hooks) m.impl->forward_hooks->check_access("load_checkpoint_and_dispatch");
        accel::big_modeling::load_checkpoint_and_dispatch(*m.impl, path, options);
    });
}

} // extern "C"
