// Version and build facts. (Status names and the error message live in guard.cpp.)
#include <accel/version.h>

#include "c_api/guard.hpp"
#include "config/json.hpp"
#include "distributed/communicator.hpp"

#include "precision/autocast.hpp"

#include <ATen/Context.h>
#include <torch/cuda.h>

#ifndef ACCEL_TORCH_VERSION
#define ACCEL_TORCH_VERSION "unknown"
#endif

namespace {
// "fp16" where LibTorch has fp16 kernels on the device an accelerator with the defaults computes on.
std::vector<std::string> mixed_precisions()
{
    std::vector<std::string> out{"no", "bf16"};
    if (accel::fp16_autocast_available(torch::cuda::is_available() ? at::kCUDA : at::kCPU, nullptr)) out.push_back("fp16");
    return out;
}
} // namespace

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
            .add("mixed_precision", mixed_precisions());
        *out = accel::capi::owned_string(w.str());
    });
}

} // extern "C"
