/* accel/status.h and accel/version.h: status names, the per-thread error message, version facts. */
#include "capi_test.h"

static void test_status_names(void)
{
    static const struct {
        accel_status_t code;
        const char *name;
    } names[] = {
        {ACCEL_OK, "ACCEL_OK"},
        {ACCEL_ERR_CANCELLED, "ACCEL_ERR_CANCELLED"},
        {ACCEL_ERR_UNKNOWN, "ACCEL_ERR_UNKNOWN"},
        {ACCEL_ERR_INVALID_ARGUMENT, "ACCEL_ERR_INVALID_ARGUMENT"},
        {ACCEL_ERR_DEADLINE_EXCEEDED, "ACCEL_ERR_DEADLINE_EXCEEDED"},
        {ACCEL_ERR_NOT_FOUND, "ACCEL_ERR_NOT_FOUND"},
        {ACCEL_ERR_ALREADY_EXISTS, "ACCEL_ERR_ALREADY_EXISTS"},
        {ACCEL_ERR_PERMISSION_DENIED, "ACCEL_ERR_PERMISSION_DENIED"},
        {ACCEL_ERR_RESOURCE_EXHAUSTED, "ACCEL_ERR_RESOURCE_EXHAUSTED"},
        {ACCEL_ERR_FAILED_PRECONDITION, "ACCEL_ERR_FAILED_PRECONDITION"},
        {ACCEL_ERR_ABORTED, "ACCEL_ERR_ABORTED"},
        {ACCEL_ERR_OUT_OF_RANGE, "ACCEL_ERR_OUT_OF_RANGE"},
        {ACCEL_ERR_UNIMPLEMENTED, "ACCEL_ERR_UNIMPLEMENTED"},
        {ACCEL_ERR_INTERNAL, "ACCEL_ERR_INTERNAL"},
        {ACCEL_ERR_UNAVAILABLE, "ACCEL_ERR_UNAVAILABLE"},
        {ACCEL_ERR_DATA_LOSS, "ACCEL_ERR_DATA_LOSS"},
    };
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; ++i) {
        const char *got = accel_status_name(names[i].code);
        CHECK(got != NULL);
        CHECK(got != NULL && strcmp(got, names[i].name) == 0);
        /* Codes are the documented numbers. */
        CHECK(names[i].code == (accel_status_t)i);
    }
    CHECK(strcmp(accel_status_name(16), "ACCEL_ERR_UNRECOGNIZED") == 0);
    CHECK(strcmp(accel_status_name(-1), "ACCEL_ERR_UNRECOGNIZED") == 0);
    CHECK(strcmp(accel_status_name(1000), "ACCEL_ERR_UNRECOGNIZED") == 0);
    CHECK(strcmp(accel_status_name(INT32_MIN), "ACCEL_ERR_UNRECOGNIZED") == 0);
}

static void test_last_error_message(void)
{
    size_t size = 0;
    accel_tensor_t *t = NULL;
    const char *msg;

    /* Never NULL, even before any call failed. */
    CHECK(accel_last_error_message() != NULL);

    CHECK_OK(accel_dtype_get_size(ACCEL_DTYPE_FLOAT32, &size));
    CHECK(size == 4);
    msg = accel_last_error_message();
    CHECK(msg != NULL && msg[0] == '\0');

    /* A failure leaves a message naming the problem. */
    CHECK(accel_dtype_get_size(99, &size) == ACCEL_ERR_INVALID_ARGUMENT);
    msg = accel_last_error_message();
    CHECK(msg != NULL && msg[0] != '\0');
    CHECK(msg != NULL && strstr(msg, "dtype") != NULL);
    /* Reading the message twice gives the same text. */
    CHECK(strcmp(accel_last_error_message(), msg) == 0);

    /* NULL out: a failure too. */
    CHECK_FAILS(accel_dtype_get_size(ACCEL_DTYPE_INT64, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK(accel_last_error_message()[0] != '\0');

    /* The next successful call clears it. */
    CHECK_OK(accel_dtype_get_size(ACCEL_DTYPE_INT64, &size));
    CHECK(size == 8);
    CHECK(strcmp(accel_last_error_message(), "") == 0);

    /* The same after a failure of another function. */
    CHECK(accel_tensor_create(NULL, 0, 1234, NULL, 0, &t) == ACCEL_ERR_INVALID_ARGUMENT);
    CHECK(t == NULL);
    CHECK(accel_last_error_message()[0] != '\0');
    {
        int32_t index = -1;
        CHECK_OK(accel_process_get_index(&index));
        CHECK(accel_last_error_message()[0] == '\0');
    }
}

static void test_string_free(void)
{
    char *json = NULL;
    accel_string_free(NULL); /* must be a no-op */
    CHECK_OK(accel_build_info_json(&json));
    CHECK(json != NULL);
    accel_string_free(json);
    CHECK_FAILS(accel_build_info_json(NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
}

static void test_dtype_sizes(void)
{
    static const struct {
        accel_dtype_t dtype;
        size_t size;
    } sizes[] = {
        {ACCEL_DTYPE_FLOAT32, 4}, {ACCEL_DTYPE_FLOAT64, 8}, {ACCEL_DTYPE_FLOAT16, 2}, {ACCEL_DTYPE_BFLOAT16, 2},
        {ACCEL_DTYPE_INT8, 1},    {ACCEL_DTYPE_UINT8, 1},   {ACCEL_DTYPE_INT16, 2},   {ACCEL_DTYPE_INT32, 4},
        {ACCEL_DTYPE_INT64, 8},   {ACCEL_DTYPE_BOOL, 1},
    };
    size_t i, got;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
        got = 0;
        CHECK_OK(accel_dtype_get_size(sizes[i].dtype, &got));
        CHECK(got == sizes[i].size);
    }
    CHECK_FAILS(accel_dtype_get_size(-1, &got), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    CHECK_FAILS(accel_dtype_get_size(10, &got), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
}

static void test_versions(void)
{
    char expected[64];
    char *json = NULL;

    CHECK(accel_version_number() == ACCEL_VERSION_NUMBER);
    CHECK(accel_version_number() ==
          ACCEL_VERSION_MAJOR * 1000000 + ACCEL_VERSION_MINOR * 1000 + ACCEL_VERSION_PATCH);
    CHECK(accel_version_string() != NULL);
    CHECK(strcmp(accel_version_string(), ACCEL_VERSION_STRING) == 0);
    snprintf(expected, sizeof expected, "%d.%d.%d", ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH);
    CHECK(strcmp(accel_version_string(), expected) == 0);
    CHECK(accel_abi_version() == ACCEL_ABI_VERSION);
    CHECK(accel_abi_version() >= 1);

    CHECK_OK(accel_build_info_json(&json));
    CHECK(json != NULL);
    if (json != NULL) {
        CHECK(json[0] == '{');
        CHECK(json[strlen(json) - 1] == '}');
        CHECK(strstr(json, "\"torch_version\"") != NULL);
        CHECK(strstr(json, "\"version\"") != NULL);
        CHECK(strstr(json, ACCEL_VERSION_STRING) != NULL);
        CHECK(strstr(json, "\"cuda\"") != NULL);
    }
    accel_string_free(json);
}

int main(void)
{
    test_status_names();
    test_last_error_message();
    test_string_free();
    test_dtype_sizes();
    test_versions();
    return capi_report("test_status");
}
