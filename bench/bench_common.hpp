// Helpers shared by the C++ benchmarks of bench/: a status check that exits, the median of timings, the clock.
#pragma once

#include <accel/accel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace bench {

inline void check(accel_status_t st, const char *what)
{
    if (st != ACCEL_OK) {
        std::fprintf(stderr, "%s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
        std::exit(1);
    }
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;

} // namespace bench
