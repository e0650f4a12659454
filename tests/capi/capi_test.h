/* A tiny test harness for C-API tests written as a C user writes them: plain C99, no C++. */
#ifndef ACCEL_CAPI_TEST_H
#define ACCEL_CAPI_TEST_H

#include <accel/accel.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int capi_failures = 0;
static int capi_checks = 0;

#define CHECK(cond)                                                                                  \
    do {                                                                                             \
        ++capi_checks;                                                                               \
        if (!(cond)) {                                                                               \
            ++capi_failures;                                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                 \
        }                                                                                            \
    } while (0)

/* The call must succeed. */
#define CHECK_OK(call)                                                                               \
    do {                                                                                             \
        accel_status_t st_ = (call);                                                                 \
        ++capi_checks;                                                                               \
        if (st_ != ACCEL_OK) {                                                                       \
            ++capi_failures;                                                                         \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call,                \
                    accel_status_name(st_), accel_last_error_message());                             \
        }                                                                                            \
    } while (0)

/* The call must fail with `status` and a message containing `fragment`. */
#define CHECK_FAILS(call, status, fragment)                                                          \
    do {                                                                                             \
        accel_status_t st_ = (call);                                                                 \
        const char *msg_ = accel_last_error_message();                                               \
        ++capi_checks;                                                                               \
        if (st_ != (status) || strstr(msg_, (fragment)) == NULL) {                                   \
            ++capi_failures;                                                                         \
            fprintf(stderr, "%s:%d: %s: expected %s with \"%s\", got %s: \"%s\"\n", __FILE__,         \
                    __LINE__, #call, accel_status_name(status), (fragment), accel_status_name(st_),  \
                    msg_);                                                                           \
        }                                                                                            \
    } while (0)

#define CHECK_NEAR(a, b, tol) CHECK(fabs((double)(a) - (double)(b)) <= (tol))

/* Prints the plain closing line and returns the process status. */
static int capi_report(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, capi_checks, capi_failures);
    return capi_failures == 0 ? 0 : 1;
}

#endif /* ACCEL_CAPI_TEST_H */
