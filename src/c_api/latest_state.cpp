// accel_accelerator_load_latest_state (accel/checkpoint.h): automatic resume, Accelerator::load_latest_state.
#include <accel/checkpoint.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "accelerator/accelerator.hpp"

using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_accelerator_load_latest_state(accel_accelerator_t *accelerator, bool *found_out) noexcept
{
    return guarded([&] {
        bool &found = out_param(found_out, "found_out");
        auto &a = *checked(accelerator, "accelerator").impl;
        found = a.load_latest_state({}).has_value();
    });
}

} // extern "C"
