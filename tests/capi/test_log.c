/* accel/log.h in one process: the level (default, ACCELERATE_LOG_LEVEL, the setter, bad values), the callback
 * (what it receives, the default restored), main_process_only / in_order with one process, and the library's own
 * warnings reaching the callback. Several processes: tests/distributed/dist_log.c.
 *   capi_test_log           the checks (ACCELERATE_LOG_LEVEL unset)
 *   capi_test_log env LVL   only: accel_log_get_level equals LVL (ctest sets ACCELERATE_LOG_LEVEL for it)
 *   capi_test_log bad       only: an unreadable ACCELERATE_LOG_LEVEL is named by accel_log_get_level */
#define _POSIX_C_SOURCE 200809L
#include "capi_test.h"

#include <stdlib.h>
#include <unistd.h>

struct seen {
    int count;
    accel_log_level_t level;
    int32_t process_index;
    char name[64];
    char message[512];
};

static void record(void *user_data, accel_log_level_t level, const char *name, int32_t process_index,
                   const char *message)
{
    struct seen *s = (struct seen *)user_data;
    ++s->count;
    s->level = level;
    s->process_index = process_index;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->message, sizeof s->message, "%s", message);
}

static void check_levels(void)
{
    accel_log_level_t level = -1;
    CHECK_OK(accel_log_get_level(&level));
    CHECK(level == ACCEL_LOG_WARNING); /* Python's root logger's default */
    CHECK_OK(accel_log_set_level(ACCEL_LOG_DEBUG));
    CHECK_OK(accel_log_get_level(&level));
    CHECK(level == ACCEL_LOG_DEBUG);
    CHECK_FAILS(accel_log_set_level(51), ACCEL_ERR_INVALID_ARGUMENT, "level: expected 0-50");
    CHECK_FAILS(accel_log_set_level(-1), ACCEL_ERR_INVALID_ARGUMENT, "got -1");
    CHECK_FAILS(accel_log_get_level(NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
}

static void check_callback(void)
{
    struct seen s;
    memset(&s, 0, sizeof s);
    accel_log_set_callback(record, &s);
    CHECK_OK(accel_log_set_level(ACCEL_LOG_INFO));
    CHECK_OK(accel_log_write(NULL, "train", ACCEL_LOG_INFO, "epoch 1", true, false));
    CHECK(s.count == 1 && s.level == ACCEL_LOG_INFO && s.process_index == 0 && strcmp(s.name, "train") == 0 &&
          strcmp(s.message, "epoch 1") == 0);
    /* Below the threshold: dropped. */
    CHECK_OK(accel_log_write(NULL, "train", ACCEL_LOG_DEBUG, "details", true, false));
    CHECK(s.count == 1);
    /* Custom levels between the named ones pass by number; NULL / "" name the library's logger. */
    CHECK_OK(accel_log_write(NULL, NULL, 25, "between", false, false));
    CHECK(s.count == 2 && s.level == 25 && strcmp(s.name, "accel") == 0);
    CHECK_OK(accel_log_write(NULL, "", ACCEL_LOG_ERROR, "bad", false, true)); /* in_order alone: just written */
    CHECK(s.count == 3 && strcmp(s.name, "accel") == 0 && strcmp(s.message, "bad") == 0);

    /* With an accelerator of one process: the same. */
    accel_accelerator_t *acc = NULL;
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_log_write(acc, "train", ACCEL_LOG_WARNING, "ordered", false, true));
    CHECK(s.count == 4 && strcmp(s.message, "ordered") == 0);
    accel_accelerator_free(acc);

    /* Bad arguments. */
    CHECK_FAILS(accel_log_write(NULL, "train", ACCEL_LOG_INFO, NULL, true, false), ACCEL_ERR_INVALID_ARGUMENT,
                "message");
    CHECK_FAILS(accel_log_write(NULL, "train", 0, "x", true, false), ACCEL_ERR_INVALID_ARGUMENT, "expected 1-50");
    CHECK_FAILS(accel_log_write(NULL, "train", 60, "x", true, false), ACCEL_ERR_INVALID_ARGUMENT, "got 60");
    CHECK(s.count == 4);

    /* The default again: nothing more reaches the callback (the line goes to standard error). */
    accel_log_set_callback(NULL, NULL);
    CHECK_OK(accel_log_write(NULL, "train", ACCEL_LOG_WARNING, "to stderr", true, false));
    CHECK(s.count == 4);
}

/* A library warning (load_checkpoint's report of keys that did not match) goes through the logger: to the
 * callback, under the name "accel", and not at all above its level. */
static void check_library_warning(void)
{
    char dir[] = "/tmp/accel_capi_log_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    accel_accelerator_t *acc = NULL;
    accel_model_t *small = NULL, *big = NULL;
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [6, 16, 3]}", &small));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [6, 16, 3, 3]}", &big));
    CHECK_OK(accel_accelerator_save_model(acc, small, dir, NULL));

    struct seen s;
    memset(&s, 0, sizeof s);
    accel_log_set_callback(record, &s);
    CHECK_OK(accel_log_set_level(ACCEL_LOG_WARNING));
    CHECK_OK(accel_model_load_checkpoint(big, dir, NULL));
    CHECK(s.count == 1 && s.level == ACCEL_LOG_WARNING && strcmp(s.name, "accel") == 0 &&
          strstr(s.message, "load_checkpoint: ") != NULL && strstr(s.message, "4.weight") != NULL);
    CHECK_OK(accel_log_set_level(ACCEL_LOG_ERROR));
    CHECK_OK(accel_model_load_checkpoint(big, dir, NULL));
    CHECK(s.count == 1);
    accel_log_set_callback(NULL, NULL);
    CHECK_OK(accel_log_set_level(ACCEL_LOG_WARNING));

    accel_model_free(big);
    accel_model_free(small);
    accel_accelerator_free(acc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "env") == 0) {
        accel_log_level_t level = -1;
        CHECK_OK(accel_log_get_level(&level));
        CHECK(level == atoi(argv[2]));
        /* The setter overrides the variable. */
        CHECK_OK(accel_log_set_level(ACCEL_LOG_CRITICAL));
        CHECK_OK(accel_log_get_level(&level));
        CHECK(level == ACCEL_LOG_CRITICAL);
        return capi_report("test_log env");
    }
    if (argc == 2 && strcmp(argv[1], "bad") == 0) {
        accel_log_level_t level = -1;
        CHECK_FAILS(accel_log_get_level(&level), ACCEL_ERR_INVALID_ARGUMENT, "ACCELERATE_LOG_LEVEL");
        CHECK_FAILS(accel_log_get_level(&level), ACCEL_ERR_INVALID_ARGUMENT, "got \"loud\"");
        /* Messages still flow at WARNING; a set level ends the complaint. */
        CHECK_OK(accel_log_set_level(ACCEL_LOG_INFO));
        CHECK_OK(accel_log_get_level(&level));
        CHECK(level == ACCEL_LOG_INFO);
        return capi_report("test_log bad");
    }
    check_levels();
    check_callback();
    check_library_warning();
    return capi_report("test_log");
}
