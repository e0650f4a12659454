/* What the C benchmarks share: a status check that stops the program, a monotonic clock and a comparison for
 * qsort (medians). */
#ifndef ACCEL_BENCH_COMMON_H
#define ACCEL_BENCH_COMMON_H

#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                                        \
    do {                                                                                                   \
        accel_status_t st_ = (call);                                                                       \
        if (st_ != ACCEL_OK) {                                                                             \
            fprintf(stderr, "%s: %s: %s\n", #call, accel_status_name(st_), accel_last_error_message());    \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

static inline double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
