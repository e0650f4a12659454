#include "common/blas_kernels.hpp"

#include <cstdlib>

#include <dlfcn.h>
#include <strings.h>

namespace accel {

std::optional<BlasKernels> openblas_kernels()
{
    using CoreName = char *(*)();
    auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    if (name == nullptr || name() == nullptr) return std::nullopt;
    BlasKernels core{name(), ""};
    // OpenBLAS's x86-64 cores without AVX2 kernels: what its detection falls back to for a CPU it does not know.
    static const char *const kOld[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge",
                                      "Barcelona", "Bobcat", "Bulldozer", "Piledriver", "Steamroller", "Excavator"};
    bool old = false;
    for (const char *o : kOld) old = old || strcasecmp(core.chosen.c_str(), o) == 0;
#if defined(__x86_64__)
    if (old) {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512cd"))
            core.suggested = "SkylakeX";
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            core.suggested = "Haswell";
    }
#else
    (void)old;
#endif
    return core;
}

std::optional<BlasKernels> generic_openblas_kernels()
{
    const char *set = std::getenv("OPENBLAS_CORETYPE");
    if (set != nullptr && *set != '\0') return std::nullopt;
    auto core = openblas_kernels();
    if (!core || core->suggested.empty()) return std::nullopt;
    return core;
}

} // namespace accel
