// Proves that the NCCL backend was really compiled into libaccel and that the libraries it opens at
// run time have every function it resolves (ctest distributed.nccl_compiled; built only when CMake's
// ACCEL_NCCL found NCCL, otherwise that test is skipped with the reason).
//  1. This program is linked directly against libnccl and libcudart and takes the address of every
//     function in nccl_api.hpp's lists: a name missing from either library fails the link.
//  2. accel_build_info_json() of the built libaccel lists "nccl" among its backends, which only the
//     compiled nccl_communicator.cpp makes it do.
//  3. ncclGetVersion() (no GPU needed) is at least the header's version accel was compiled with.
#include <accel/accel.h>

#include "distributed/nccl_api.hpp"

#include <cstdio>
#include <cstring>

namespace {

#define ACCEL_TAKE(f) reinterpret_cast<const void *>(&::f),
#define ACCEL_TAKE_TYPED(f, type) reinterpret_cast<const void *>(static_cast<std::add_pointer_t<type>>(&::f)),
const void *const kFunctions[] = {ACCEL_CUDART_FUNCTIONS(ACCEL_TAKE, ACCEL_TAKE_TYPED) ACCEL_NCCL_FUNCTIONS(ACCEL_TAKE)};

} // namespace

int main()
{
    int failures = 0;
    size_t linked = 0;
    for (const void *f : kFunctions) linked += f != nullptr;
    std::printf("nccl_link_check: %zu of %zu CUDA runtime and NCCL functions linked\n", linked,
                sizeof kFunctions / sizeof kFunctions[0]);
    failures += linked != sizeof kFunctions / sizeof kFunctions[0];

    char *info = nullptr;
    if (accel_build_info_json(&info) != ACCEL_OK) {
        std::printf("accel_build_info_json failed: %s\n", accel_last_error_message());
        return 1;
    }
    const char *backends = std::strstr(info, "\"backends\"");
    const char *end = backends ? std::strchr(backends, ']') : nullptr;
    const char *nccl = backends ? std::strstr(backends, "\"nccl\"") : nullptr;
    std::printf("build info: %s\n", info);
    if (nccl == nullptr || end == nullptr || nccl > end) {
        std::printf("FAIL: libaccel's build info does not list \"nccl\" among its backends\n");
        ++failures;
    }
    accel_string_free(info);

    int version = 0;
    ncclResult_t r = ncclGetVersion(&version);
    std::printf("libnccl version %d, headers %d\n", version, NCCL_VERSION_CODE);
    if (r != ncclSuccess || version < NCCL_VERSION_CODE / 100 * 100) { // same major.minor or newer
        std::printf("FAIL: ncclGetVersion returned %d, version %d\n", static_cast<int>(r), version);
        ++failures;
    }
    return failures == 0 ? 0 : 1;
}
