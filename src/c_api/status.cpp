// Version and build facts. (Status names and the error message live in guard.cpp.)
#include <accel/version.h>

#include "c_api/guard.hpp"
#include "config/json.hpp"
#include "distributed/communicator.hpp"

#include <ATen/Context.h>

#ifndef ACCEL_TORCH_VERSION
#define ACCEL_TORCH_VERSION "unknown"
#endif

extern "C" {

ACCEL_API int32_t accel_version_number(void) noexcept { return ACCEL_VERSION_NUMBER; }

ACCEL_API const char *accel_version_string(void) noexcept { return ACCEL_VERSION_STRING; }

ACCEL_API int32_t accel_abi_version(void) noexcept { return ACCEL_ABI_VERSION; }

ACCEL_API accel_status_t accel_build_info_json(char **out) noexcept
{
    return accel::capi::guarded([&] {
        accel::capi::out_param(out);
        accel::config::JsonWriter w;
        w.add("version", ACCEL_VERSION_STRING)
            .add("abi_version", static_cast<int64_t>(ACCEL_ABI_VERSION))
            .add("torch_version", ACCEL_TORCH_VERSION)
            .add("cuda", at::hasCUDA())
            .add("backends", accel::distributed::compiled_backends())
            .add("mixed_precision", std::vector<std::string>{"no", "bf16"});
        *out = accel::capi::owned_string(w.str());
    });
}

} // extern "C"
