#include "common/allocator.hpp"

#include <malloc.h>

#include <mutex>

namespace accel {

namespace {
bool tuned = false;
}

void tune_allocator_once(bool enabled)
{
    if (!enabled) return;
    static std::once_flag once;
    std::call_once(once, [] {
#if defined(__GLIBC__)
        // glibc caps the mmap threshold at 32 MiB on 64-bit; tensors above it still come from mmap.
        const int mib = 1024 * 1024;
        bool ok = mallopt(M_MMAP_THRESHOLD, 32 * mib) == 1;
        ok = mallopt(M_TRIM_THRESHOLD, 1024 * mib) == 1 && ok;
        tuned = ok;
#endif
    });
}

bool allocator_tuned() { return tuned; }

void return_free_memory()
{
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

} // namespace accel
