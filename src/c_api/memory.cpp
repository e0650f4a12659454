// accel_find_executable_batch_size (accel/memory.h): the caller's step as a C callback around
// accel::find_executable_batch_size.
#include <accel/memory.h>

#include "c_api/guard.hpp"
#include "common/find_executable_batch_size.hpp"
#include "config/batch_size_options.hpp"

using accel::fail;
using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_find_executable_batch_size(int64_t starting_batch_size, const char *options_json,
                                                          accel_batch_size_step_fn_t step, void *user_data,
                                                          int64_t *out) noexcept
{
    return guarded([&] {
        int64_t &found = out_param(out);
        if (step == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "step: must not be NULL");
        const auto options = accel::config::parse_batch_size_options(options_json, "options_json");
        found = accel::find_executable_batch_size(starting_batch_size, options, [&](int64_t batch_size) {
            set_last_error(""); // what the step leaves (accel_callback_set_error, a failed accel call) is its message
            const accel_status_t st = step(user_data, batch_size);
            if (st == ACCEL_OK) return;
            const std::string message = accel_last_error_message();
            fail(st > 0 ? st : ACCEL_ERR_UNKNOWN,
                 message.empty() ? std::string("returned ") + accel_status_name(st) : message);
        });
    });
}

} // extern "C"
