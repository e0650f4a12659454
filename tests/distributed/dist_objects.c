/*
 * dist_objects
 *
 * The object collectives on P processes (rank r) against what each process sent: byte strings of different
 * lengths, empty ones, 8 MB ones, JSON, and bad input on one process failing the call on every process with
 * INVALID_ARGUMENT naming it, after which the collectives go on working. Prints "objects: ok" per process.
 */
#include "dist_common.h"

#include <string.h>

#define LARGE ((size_t)8 << 20)

static uint8_t pattern(size_t i, int32_t r) { return (uint8_t)(i * 31u + (size_t)r * 7u + (i >> 13)); }

static uint8_t *large_object(int32_t r)
{
    uint8_t *b = malloc(LARGE);
    DIST_EXPECT(b != NULL, "out of memory");
    for (size_t i = 0; i < LARGE; ++i) b[i] = pattern(i, r);
    return b;
}

/* Entry i of the list, checked against `size` bytes at `want`. */
static void expect_item(const accel_object_list_t *list, size_t i, const void *want, size_t size, const char *what)
{
    const uint8_t *data = NULL;
    size_t got = 0;
    DIST_CHECK(accel_object_list_get_item(list, i, &data, &got));
    DIST_EXPECT(got == size, "%s[%zu]: %zu bytes, expected %zu", what, i, got, size);
    DIST_EXPECT(size == 0 || memcmp(data, want, size) == 0, "%s[%zu]: other bytes than sent", what, i);
}

static void expect_count(const accel_object_list_t *list, size_t n, const char *what)
{
    size_t count = 0;
    DIST_CHECK(accel_object_list_get_count(list, &count));
    DIST_EXPECT(count == n, "%s: %zu entries, expected %zu", what, count, n);
}

/* The call failed with INVALID_ARGUMENT and a message containing `fragment`. */
static void expect_invalid(accel_status_t st, const char *fragment, const char *what)
{
    DIST_EXPECT(st == ACCEL_ERR_INVALID_ARGUMENT && strstr(accel_last_error_message(), fragment) != NULL,
                "%s: got %s \"%s\", expected INVALID_ARGUMENT with \"%s\"", what, accel_status_name(st),
                accel_last_error_message(), fragment);
}

/* Rank r sends (r + 1) * 3 bytes of 'a' + r, rank 1 nothing; then rank 0 sends 8 MB; then every rank nothing. */
static void check_gather(accel_accelerator_t *acc, int32_t r, int32_t p)
{
    char mine[64], want[64];
    size_t n = r == 1 ? 0 : (size_t)(r + 1) * 3;
    memset(mine, 'a' + r, n);
    accel_object_list_t *list = NULL;
    DIST_CHECK(accel_accelerator_gather_object(acc, (const uint8_t *)mine, n, &list));
    expect_count(list, (size_t)p, "gather_object");
    for (int32_t q = 0; q < p; ++q) {
        size_t m = q == 1 ? 0 : (size_t)(q + 1) * 3;
        memset(want, 'a' + q, m);
        expect_item(list, (size_t)q, want, m, "gather_object");
    }
    accel_object_list_free(list);

    uint8_t *big = large_object(0);
    DIST_CHECK(accel_accelerator_gather_object(acc, r == 0 ? big : (const uint8_t *)"tail", r == 0 ? LARGE : 4, &list));
    expect_count(list, (size_t)p, "gather_object large");
    expect_item(list, 0, big, LARGE, "gather_object large");
    for (int32_t q = 1; q < p; ++q) expect_item(list, (size_t)q, "tail", 4, "gather_object large");
    accel_object_list_free(list);
    free(big);

    DIST_CHECK(accel_accelerator_gather_object(acc, NULL, 0, &list));
    expect_count(list, (size_t)p, "gather_object empty");
    for (int32_t q = 0; q < p; ++q) expect_item(list, (size_t)q, NULL, 0, "gather_object empty");
    accel_object_list_free(list);
}

/* The last rank broadcasts a list with an empty entry, a NUL byte and 8 MB; rank 1 broadcasts 8 MB alone; rank 0
 * an empty list. The receivers pass nothing. */
static void check_broadcast(accel_accelerator_t *acc, int32_t r, int32_t p)
{
    uint8_t *big = large_object(p - 1);
    const uint8_t *items[4] = {(const uint8_t *)"alpha", NULL, (const uint8_t *)"\0z", big};
    size_t sizes[4] = {5, 0, 2, LARGE};
    accel_object_list_t *list = NULL;
    const bool last = r == p - 1;
    DIST_CHECK(accel_accelerator_broadcast_object_list(acc, last ? items : NULL, last ? sizes : NULL, last ? 4 : 0,
                                                       p - 1, &list));
    expect_count(list, 4, "broadcast_object_list");
    for (size_t i = 0; i < 4; ++i) expect_item(list, i, items[i], sizes[i], "broadcast_object_list");
    accel_object_list_free(list);
    free(big);

    big = large_object(1);
    DIST_CHECK(accel_accelerator_broadcast_object(acc, r == 1 ? big : NULL, r == 1 ? LARGE : 0, 1, &list));
    expect_count(list, 1, "broadcast_object");
    expect_item(list, 0, big, LARGE, "broadcast_object");
    accel_object_list_free(list);
    free(big);

    /* Receivers' inputs are ignored, even when they hold something. */
    DIST_CHECK(accel_accelerator_broadcast_object_list(acc, r == 0 ? NULL : items, sizes, r == 0 ? 0 : 1, 0, &list));
    expect_count(list, 0, "broadcast_object_list empty");
    accel_object_list_free(list);
}

static void expect_text(char *got, const char *want, const char *what)
{
    DIST_EXPECT(got != NULL && strcmp(got, want) == 0, "%s: got %s, expected %s", what, got ? got : "NULL", want);
    accel_string_free(got);
}

/* Rank r sends [r, "s<r>"] (rank 1: []); the gathered array holds every element in rank order. */
static void check_json(accel_accelerator_t *acc, int32_t r, int32_t p)
{
    char mine[64], want[256] = "[";
    if (r == 1) snprintf(mine, sizeof mine, " [ ] ");
    else snprintf(mine, sizeof mine, "[%d, \"s%d\"]", r, r);
    for (int32_t q = 0; q < p; ++q) {
        if (q == 1) continue;
        size_t len = strlen(want);
        snprintf(want + len, sizeof want - len, "%s%d, \"s%d\"", len > 1 ? ", " : "", q, q);
    }
    strcat(want, "]");
    char *out = NULL;
    DIST_CHECK(accel_accelerator_gather_object_json(acc, mine, &out));
    expect_text(out, want, "gather_object_json");

    const char *value = "{\"epoch\": 2, \"names\": [\"a\", \"b\"], \"ok\": true}";
    out = NULL;
    DIST_CHECK(accel_accelerator_broadcast_object_json(acc, r == p - 1 ? value : NULL, p - 1, &out));
    expect_text(out, value, "broadcast_object_json");
}

/* One process's bad input fails the call everywhere, naming that process; the next collectives still work. */
static void check_bad_inputs(accel_accelerator_t *acc, int32_t r, int32_t p)
{
    accel_object_list_t *list = NULL;
    accel_status_t st = accel_accelerator_gather_object(acc, r == 1 ? NULL : (const uint8_t *)"ok", r == 1 ? 5 : 2, &list);
    expect_invalid(st, r == 1 ? "data: must not be NULL when its size is 5" : "the input of process 1 was invalid",
                   "gather_object, bad data on rank 1");
    DIST_EXPECT(list == NULL, "a failed gather_object left a list");

    char *out = NULL;
    st = accel_accelerator_gather_object_json(acc, r == 0 ? "{\"not\": \"a list\"}" : "[1]", &out);
    expect_invalid(st, r == 0 ? "json: expected a JSON array" : "the input of process 0 was invalid",
                   "gather_object_json, an object on rank 0");
    st = accel_accelerator_broadcast_object_json(acc, r == 0 ? "[1," : "ignored", 0, &out);
    expect_invalid(st, r == 0 ? "json: malformed JSON" : "the input of process 0 was invalid",
                   "broadcast_object_json, malformed on rank 0");
    const uint8_t *bad[1] = {NULL};
    size_t bad_size[1] = {9};
    st = accel_accelerator_broadcast_object_list(acc, bad, bad_size, 1, p - 1, &list);
    expect_invalid(st, r == p - 1 ? "items[0]: must not be NULL" : "was invalid", "broadcast_object_list, NULL item");
    st = accel_accelerator_broadcast_object(acc, NULL, 0, p, &list);
    DIST_EXPECT(st == ACCEL_ERR_OUT_OF_RANGE, "from_process %d: got %s", p, accel_status_name(st));

    /* Still in step: a gather after the failures returns every rank's index. */
    uint8_t me = (uint8_t)r;
    DIST_CHECK(accel_accelerator_gather_object(acc, &me, 1, &list));
    for (int32_t q = 0; q < p; ++q) {
        uint8_t b = (uint8_t)q;
        expect_item(list, (size_t)q, &b, 1, "gather_object after failures");
    }
    accel_object_list_free(list);
}

int main(int argc, char **argv)
{
    accel_accelerator_t *acc = NULL;
    DIST_CHECK(accel_accelerator_create(argc > 2 ? argv[2] : NULL, &acc));
    int32_t r = 0, p = 0;
    DIST_CHECK(accel_accelerator_get_process_index(acc, &r));
    DIST_CHECK(accel_accelerator_get_num_processes(acc, &p));
    DIST_EXPECT(p >= 2, "expected several processes, got %d", p);
    const char *backend = NULL;
    DIST_CHECK(accel_accelerator_get_distributed_backend(acc, &backend));
    DIST_EXPECT(argc > 1 && strcmp(backend, argv[1]) == 0, "backend %s, expected %s", backend, argc > 1 ? argv[1] : "?");
    check_gather(acc, r, p);
    check_broadcast(acc, r, p);
    check_json(acc, r, p);
    check_bad_inputs(acc, r, p);
    DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
    printf("objects: ok rank %d of %d (%s)\n", r, p, backend);
    accel_accelerator_free(acc);
    return 0;
}
