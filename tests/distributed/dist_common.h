/* Helpers shared by the multi-process test programs (plain C99 over the public API). */
#ifndef ACCEL_DIST_COMMON_H
#define ACCEL_DIST_COMMON_H

#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>

#define DIST_CHECK(call)                                                                                  \
    do {                                                                                                  \
        accel_status_t st_ = (call);                                                                      \
        if (st_ != ACCEL_OK) {                                                                            \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, accel_status_name(st_),     \
                    accel_last_error_message());                                                          \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

#define DIST_EXPECT(cond, ...)                                                                            \
    do {                                                                                                  \
        if (!(cond)) {                                                                                    \
            fprintf(stderr, "%s:%d: expectation failed: %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                                 \
            fprintf(stderr, "\n");                                                                        \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

static inline accel_tensor_t *dist_tensor_f32(const float *data, int64_t n)
{
    accel_tensor_t *t = NULL;
    int64_t shape[1] = {n};
    DIST_CHECK(accel_tensor_create(data, (size_t)n * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 1, &t));
    return t;
}

static inline int64_t dist_numel(const accel_tensor_t *t)
{
    int64_t n = 0;
    DIST_CHECK(accel_tensor_get_numel(t, &n));
    return n;
}

#endif
