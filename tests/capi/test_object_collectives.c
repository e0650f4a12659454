/* Object collectives in one process (gather_object, broadcast_object_list, broadcast_object and their JSON
 * forms return their input), accel_object_list_t, and argument checking. Several processes:
 * tests/distributed/dist_objects.c. */
#include "capi_test.h"

#include <accel/accel.h>

#include <string.h>

/* The list has `n` entries equal to `want` (each `sizes[i]` bytes). */
static void expect_list(const accel_object_list_t *list, const char *const *want, const size_t *sizes, size_t n)
{
    size_t count = 99;
    CHECK_OK(accel_object_list_get_count(list, &count));
    CHECK(count == n);
    for (size_t i = 0; i < n && i < count; ++i) {
        const uint8_t *data = NULL;
        size_t size = 99;
        CHECK_OK(accel_object_list_get_item(list, i, &data, &size));
        CHECK(data != NULL);
        CHECK(size == sizes[i]);
        CHECK(size != sizes[i] || size == 0 || memcmp(data, want[i], size) == 0);
    }
}

static void check_bytes(accel_accelerator_t *acc)
{
    accel_object_list_t *list = NULL;
    const char hello[] = "hel\0lo"; /* a NUL inside: bytes, not C strings */
    const char *one[1] = {hello};
    size_t one_size[1] = {6};
    CHECK_OK(accel_accelerator_gather_object(acc, (const uint8_t *)hello, 6, &list));
    expect_list(list, one, one_size, 1);
    accel_object_list_free(list);

    /* Empty objects: NULL with size 0 is an empty object. */
    size_t zero[1] = {0};
    CHECK_OK(accel_accelerator_gather_object(acc, NULL, 0, &list));
    expect_list(list, one, zero, 1);
    accel_object_list_free(list);

    const char *items[3] = {"alpha", NULL, "\x01\x02"};
    size_t sizes[3] = {5, 0, 2};
    CHECK_OK(accel_accelerator_broadcast_object_list(acc, (const uint8_t *const *)items, sizes, 3, 0, &list));
    expect_list(list, items, sizes, 3);
    accel_object_list_free(list);
    CHECK_OK(accel_accelerator_broadcast_object_list(acc, NULL, NULL, 0, 0, &list));
    expect_list(list, items, sizes, 0);
    accel_object_list_free(list);

    CHECK_OK(accel_accelerator_broadcast_object(acc, (const uint8_t *)hello, 6, 0, &list));
    expect_list(list, one, one_size, 1);
    accel_object_list_free(list);
}

/* Calls gather_object_json (from_process < 0) or broadcast_object_json and compares the text. */
static void expect_json(accel_accelerator_t *acc, const char *json, int32_t from_process, const char *want)
{
    char *got = NULL;
    accel_status_t st = from_process < 0 ? accel_accelerator_gather_object_json(acc, json, &got)
                                         : accel_accelerator_broadcast_object_json(acc, json, from_process, &got);
    CHECK(st == ACCEL_OK);
    CHECK(got != NULL && strcmp(got, want) == 0);
    if (got == NULL || strcmp(got, want) != 0)
        fprintf(stderr, "%s: got %s (%s), expected %s\n", json, got ? got : "NULL", accel_last_error_message(), want);
    accel_string_free(got);
}

static void check_json(accel_accelerator_t *acc)
{
    expect_json(acc, "[1, {\"a\": [2, 3]}, \"x\"]", -1, "[1, {\"a\": [2, 3]}, \"x\"]");
    expect_json(acc, " [ ]\n", -1, "[]");
    expect_json(acc, "\t[ null ] ", -1, "[null]");
    expect_json(acc, "{\"step\": 3, \"tags\": [\"a\"]}", 0, "{\"step\": 3, \"tags\": [\"a\"]}");
    expect_json(acc, "\"text\"", 0, "\"text\"");
}

static void check_bad_inputs(accel_accelerator_t *acc)
{
    accel_object_list_t *list = (accel_object_list_t *)&list; /* not NULL: failures must clear it */
    char *out = (char *)&out;
    const uint8_t x = 7;
    CHECK_FAILS(accel_accelerator_gather_object(NULL, &x, 1, &list), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK(list == NULL);
    CHECK_FAILS(accel_accelerator_gather_object(acc, &x, 1, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_gather_object(acc, NULL, 5, &list), ACCEL_ERR_INVALID_ARGUMENT,
                "data: must not be NULL when its size is 5");
    CHECK(list == NULL);
    const uint8_t *items[2] = {&x, NULL};
    size_t sizes[2] = {1, 3};
    CHECK_FAILS(accel_accelerator_broadcast_object_list(acc, items, sizes, 2, 0, &list), ACCEL_ERR_INVALID_ARGUMENT,
                "items[1]: must not be NULL when its size is 3");
    CHECK_FAILS(accel_accelerator_broadcast_object_list(acc, NULL, sizes, 2, 0, &list), ACCEL_ERR_INVALID_ARGUMENT,
                "items: must not be NULL when count is 2");
    CHECK_FAILS(accel_accelerator_broadcast_object_list(acc, items, NULL, 2, 0, &list), ACCEL_ERR_INVALID_ARGUMENT,
                "sizes: must not be NULL");
    CHECK_FAILS(accel_accelerator_broadcast_object_list(acc, items, sizes, 1, 1, &list), ACCEL_ERR_OUT_OF_RANGE,
                "from_process: expected a rank in 0..0, got 1");
    CHECK_FAILS(accel_accelerator_broadcast_object(acc, &x, 1, -1, &list), ACCEL_ERR_OUT_OF_RANGE, "got -1");
    CHECK_FAILS(accel_accelerator_broadcast_object(acc, NULL, 2, 0, &list), ACCEL_ERR_INVALID_ARGUMENT, "data");
    CHECK(list == NULL);

    CHECK_FAILS(accel_accelerator_gather_object_json(acc, "{\"a\": 1}", &out), ACCEL_ERR_INVALID_ARGUMENT,
                "json: expected a JSON array");
    CHECK(out == NULL);
    CHECK_FAILS(accel_accelerator_gather_object_json(acc, "[1, 2", &out), ACCEL_ERR_INVALID_ARGUMENT,
                "json: malformed JSON");
    CHECK_FAILS(accel_accelerator_gather_object_json(acc, "[1] [2]", &out), ACCEL_ERR_INVALID_ARGUMENT,
                "json: malformed JSON");
    CHECK_FAILS(accel_accelerator_gather_object_json(acc, NULL, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "json: must not be NULL");
    CHECK_FAILS(accel_accelerator_broadcast_object_json(acc, "nul", 0, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "json: malformed JSON");
    CHECK_FAILS(accel_accelerator_broadcast_object_json(acc, NULL, 0, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "json: must not be NULL");
    CHECK_FAILS(accel_accelerator_broadcast_object_json(acc, "1", 3, &out), ACCEL_ERR_OUT_OF_RANGE, "from_process");
    CHECK_FAILS(accel_accelerator_broadcast_object_json(NULL, "1", 0, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "accelerator");
    CHECK(out == NULL);

    CHECK_OK(accel_accelerator_gather_object(acc, &x, 1, &list));
    size_t count = 5;
    const uint8_t *data = &x;
    size_t size = 5;
    CHECK_FAILS(accel_object_list_get_item(list, 1, &data, &size), ACCEL_ERR_OUT_OF_RANGE, "index: expected 0..1");
    CHECK(data == NULL && size == 0);
    CHECK_FAILS(accel_object_list_get_item(list, 0, NULL, &size), ACCEL_ERR_INVALID_ARGUMENT, "out_data");
    CHECK_FAILS(accel_object_list_get_item(list, 0, &data, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out_size");
    CHECK_FAILS(accel_object_list_get_item(NULL, 0, &data, &size), ACCEL_ERR_INVALID_ARGUMENT, "list");
    CHECK_FAILS(accel_object_list_get_count(NULL, &count), ACCEL_ERR_INVALID_ARGUMENT, "list");
    CHECK(count == 0);
    CHECK_FAILS(accel_object_list_get_count(list, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    accel_object_list_free(list);
    accel_object_list_free(NULL);
}

int main(void)
{
    accel_accelerator_t *acc = NULL;
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    if (acc == NULL) return capi_report("test_object_collectives");
    check_bytes(acc);
    check_json(acc);
    check_bad_inputs(acc);
    accel_accelerator_free(acc);
    return capi_report("test_object_collectives");
}
