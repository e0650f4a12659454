// accel/tracking.h: thin shells over src/tracking (through the accelerator's Trackers).
#include <accel/tracking.h>

#include "c_api/accelerator_access.hpp"
#include "tracking/tracking.hpp"

using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_accelerator_add_tracker(accel_accelerator_t *accelerator, const char *name,
                                                       accel_tracker_fn_t fn, void *user_data) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        const char *n = checked_string(name, "name");
        if (fn == nullptr) accel::fail(ACCEL_ERR_INVALID_ARGUMENT, "fn: must not be NULL");
        a.trackers().add_callback(n, [fn, user_data](accel::tracking::Event e, const std::string &json, int64_t step) {
            return static_cast<int32_t>(fn(user_data, static_cast<accel_tracker_event_t>(e), json.c_str(), step));
        });
    });
}

ACCEL_API accel_status_t accel_accelerator_init_trackers(accel_accelerator_t *accelerator, const char *project_name,
                                                         const char *config_json, const char *init_kwargs_json) noexcept
{
    return guarded([&] { acc_of(accelerator).trackers().init(project_name, config_json, init_kwargs_json); });
}

ACCEL_API accel_status_t accel_accelerator_log(accel_accelerator_t *accelerator, const char *values_json,
                                               int64_t step) noexcept
{
    return guarded([&] { acc_of(accelerator).trackers().log(values_json, step); });
}

ACCEL_API accel_status_t accel_accelerator_end_training(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).trackers().end_training(); });
}

ACCEL_API accel_status_t accel_accelerator_get_tracker_json(accel_accelerator_t *accelerator, const char *name,
                                                            char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        *out = owned_string(a.trackers().tracker_json(name));
    });
}

} // extern "C"
