#include <accel/checkpoint.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"

using accel::fail;
using namespace accel::capi;

// save_state/load_state need the safetensors and torch-pickle writers, which are not built yet.
extern "C" {

ACCEL_API accel_status_t accel_accelerator_save_state(accel_accelerator_t *accelerator, const char *output_dir) noexcept
{
    return guarded([&] {
        checked(accelerator, "accelerator");
        (void)output_dir;
        fail(ACCEL_ERR_UNIMPLEMENTED, "save_state: checkpointing is not yet supported by accel");
    });
}

ACCEL_API accel_status_t accel_accelerator_load_state(accel_accelerator_t *accelerator, const char *input_dir) noexcept
{
    return guarded([&] {
        checked(accelerator, "accelerator");
        (void)input_dir;
        fail(ACCEL_ERR_UNIMPLEMENTED, "load_state: checkpointing is not yet supported by accel");
    });
}

} // extern "C"
