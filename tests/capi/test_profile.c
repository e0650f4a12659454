/* accelerator.profile() from C: kwargs_handlers.profile's keys (each refused by name where accel cannot honour
 * it), the effective config, profile_begin / profile_end's preconditions, a profile left open when the
 * accelerator is freed. The traces themselves: tests/distributed/run_profile.py. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, access */
#include "capi_test.h"

#include <accel/accel.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* accel_accelerator_create with kwargs_handlers.profile = `profile` must fail with `status` naming `fragment`. */
static void expect_refused(const char *profile, accel_status_t status, const char *fragment)
{
    char json[512];
    accel_accelerator_t *acc = NULL;
    snprintf(json, sizeof json, "{\"kwargs_handlers\": {\"profile\": %s}}", profile);
    CHECK_FAILS(accel_accelerator_create(json, &acc), status, fragment);
    CHECK(acc == NULL);
    accel_accelerator_free(acc);
}

static void test_config_keys(void)
{
    expect_refused("{\"with_modules\": true}", ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.profile.with_modules");
    expect_refused("{\"on_trace_ready\": \"tensorboard\"}", ACCEL_ERR_UNIMPLEMENTED, "on_trace_ready");
    expect_refused("{\"activities\": [\"cpu\", \"tpu\"]}", ACCEL_ERR_INVALID_ARGUMENT, "activities[1]");
    expect_refused("{\"activities\": [\"xpu\"]}", ACCEL_ERR_UNIMPLEMENTED, "\"xpu\"");
    expect_refused("{\"activities\": \"cpu\"}", ACCEL_ERR_INVALID_ARGUMENT, "activities");
    expect_refused("{\"schedule_option\": {\"wait\": 1, \"warmup\": 1}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "schedule_option.active");
    expect_refused("{\"schedule_option\": {\"wait\": 1, \"warmup\": 1, \"active\": 0}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "schedule_option.active");
    expect_refused("{\"schedule_option\": {\"wait\": 0, \"warmup\": 0, \"active\": 1, \"cycles\": 2}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "cycles");
    expect_refused("{\"schedule_option\": {\"wait\": -1, \"warmup\": 0, \"active\": 1}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "schedule_option.wait");
    expect_refused("{\"record_shapes\": \"yes\"}", ACCEL_ERR_INVALID_ARGUMENT, "record_shapes");
    expect_refused("{\"output_trace_dir\": \"\"}", ACCEL_ERR_INVALID_ARGUMENT, "output_trace_dir");
    expect_refused("{\"with_flop\": true}", ACCEL_ERR_INVALID_ARGUMENT, "with_flop");

    /* "cuda": only where LibTorch has CUDA and a GPU; refused by name elsewhere (as on this CPU machine). */
    accel_accelerator_t *acc = NULL;
    accel_status_t st = accel_accelerator_create("{\"kwargs_handlers\": {\"profile\": {\"activities\": [\"cuda\"]}}}",
                                                 &acc);
    CHECK(st == ACCEL_OK || (st == ACCEL_ERR_UNIMPLEMENTED && strstr(accel_last_error_message(), "activities[0]")));
    accel_accelerator_free(acc);

    /* Every key accepted shows in the effective config. */
    acc = NULL;
    CHECK_OK(accel_accelerator_create("{\"kwargs_handlers\": {\"profile\": {\"activities\": [\"cpu\"], "
                                      "\"schedule_option\": {\"wait\": 1, \"warmup\": 2, \"active\": 3, \"repeat\": 4, "
                                      "\"skip_first\": 5}, \"record_shapes\": true, \"profile_memory\": true, "
                                      "\"with_stack\": true, \"with_flops\": true, \"output_trace_dir\": \"t\"}}}",
                                      &acc));
    char *json = NULL;
    CHECK_OK(accel_accelerator_get_config_json(acc, &json));
    CHECK(json != NULL && strstr(json, "\"profile\"") != NULL);
    CHECK(json != NULL && strstr(json, "\"skip_first\":5") != NULL);
    CHECK(json != NULL && strstr(json, "\"with_flops\":true") != NULL);
    CHECK(json != NULL && strstr(json, "\"output_trace_dir\":\"t\"") != NULL);
    if (json != NULL && strstr(json, "\"skip_first\":5") == NULL) fprintf(stderr, "effective config: %s\n", json);
    accel_string_free(json);
    accel_accelerator_free(acc);
}

static void test_begin_end(void)
{
    accel_accelerator_t *acc = NULL;
    CHECK_FAILS(accel_accelerator_profile_begin(NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_profile_end(NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_FAILS(accel_accelerator_profile_begin(acc), ACCEL_ERR_FAILED_PRECONDITION, "output_trace_dir");
    CHECK_FAILS(accel_accelerator_profile_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "no profile is running");
    accel_accelerator_free(acc);

    char dir[] = "/tmp/accel_profile_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char file[64], json[256], trace[96];
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
    /* output_trace_dir is a file: begin fails (before any training), and the profiler is not left on. */
    snprintf(json, sizeof json, "{\"kwargs_handlers\": {\"profile\": {\"output_trace_dir\": \"%s\"}}}", file);
    acc = NULL;
    CHECK_OK(accel_accelerator_create(json, &acc));
    CHECK(accel_accelerator_profile_begin(acc) != ACCEL_OK);
    accel_accelerator_free(acc);

    /* A profile left open when the accelerator goes: stopped, nothing written; a new one starts afterwards. */
    snprintf(json, sizeof json, "{\"kwargs_handlers\": {\"profile\": {\"output_trace_dir\": \"%s/t\"}}}", dir);
    snprintf(trace, sizeof trace, "%s/t/profile_0.json", dir);
    acc = NULL;
    CHECK_OK(accel_accelerator_create(json, &acc));
    CHECK_OK(accel_accelerator_profile_begin(acc));
    accel_accelerator_free(acc);
    CHECK(access(trace, F_OK) != 0);
    acc = NULL;
    CHECK_OK(accel_accelerator_create(json, &acc));
    CHECK_OK(accel_accelerator_profile_begin(acc));
    CHECK_FAILS(accel_accelerator_profile_begin(acc), ACCEL_ERR_FAILED_PRECONDITION, "already running");
    CHECK_OK(accel_accelerator_profile_end(acc));
    CHECK(access(trace, F_OK) == 0);
    CHECK_FAILS(accel_accelerator_profile_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "no profile is running");
    accel_accelerator_free(acc);
    remove(trace);
    snprintf(trace, sizeof trace, "%s/t", dir);
    rmdir(trace);
    remove(file);
    rmdir(dir);
}

int main(void)
{
    test_config_keys();
    test_begin_end();
    return capi_report("test_profile");
}
