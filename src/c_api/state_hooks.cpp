// accel_accelerator_register_save_state_pre_hook / _load_state_pre_hook / remove_state_hook (accel/checkpoint.h).
#include <accel/checkpoint.h>

#include "c_api/accelerator_access.hpp"

#include <memory>
#include <string>

using accel::fail;
using namespace accel::capi;

namespace {

accel_status_t register_hook(accel_accelerator_t *accelerator, bool save, accel_state_hook_fn_t hook,
                             accel_state_hook_release_fn_t release, void *user_data, int64_t *out_handle)
{
    return guarded([&] {
        out_param(out_handle, "out_handle");
        auto &a = acc_of(accelerator);
        if (hook == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "hook: must not be NULL");
        // The binding's object lives as long as the last copy of the hook (removal, or the accelerator's end).
        std::shared_ptr<void> owner(user_data, [release](void *p) {
            if (release != nullptr) release(p);
        });
        *out_handle = a.register_state_pre_hook(save, [hook, owner](const std::string &folder, int32_t index) {
            const accel_status_t st = hook(owner.get(), folder.c_str(), index);
            if (st == ACCEL_OK) return;
            const std::string message = accel_last_error_message(); // accel_callback_set_error's, if any
            fail(st > 0 ? st : ACCEL_ERR_UNKNOWN,
                 std::string("returned ") + accel_status_name(st) + (message.empty() ? "" : ": " + message));
        });
    });
}

} // namespace

extern "C" {

ACCEL_API accel_status_t accel_accelerator_register_save_state_pre_hook(accel_accelerator_t *accelerator,
                                                                       accel_state_hook_fn_t hook,
                                                                       accel_state_hook_release_fn_t release,
                                                                       void *user_data, int64_t *out_handle) noexcept
{
    return register_hook(accelerator, true, hook, release, user_data, out_handle);
}

ACCEL_API accel_status_t accel_accelerator_register_load_state_pre_hook(accel_accelerator_t *accelerator,
                                                                       accel_state_hook_fn_t hook,
                                                                       accel_state_hook_release_fn_t release,
                                                                       void *user_data, int64_t *out_handle) noexcept
{
    return register_hook(accelerator, false, hook, release, user_data, out_handle);
}

ACCEL_API accel_status_t accel_accelerator_remove_state_hook(accel_accelerator_t *accelerator, int64_t handle) noexcept
{
    return guarded([&] { acc_of(accelerator).remove_state_hook(handle); });
}

} // extern "C"
