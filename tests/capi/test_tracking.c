/* accel/tracking.h: trackers as a C user drives them, every bad input included.
 *   capi_test_tracking             the checks
 *   capi_test_tracking write DIR   writes a known run (log_with "all" + a callback tracker) under DIR for
 *                                  check_tensorboard.py, which reads it back (also under accel launch -n 2) */
#define _POSIX_C_SOURCE 200809L
#include "capi_test.h"

#include <dirent.h>
#include <unistd.h>

struct recorder {
    int init, log, finish;
    int64_t last_step;
    char last_json[512];
    accel_status_t answer; /* what the callback returns */
};

static accel_status_t record(void *user_data, accel_tracker_event_t event, const char *json, int64_t step)
{
    struct recorder *r = (struct recorder *)user_data;
    if (event == ACCEL_TRACKER_EVENT_INIT) ++r->init;
    if (event == ACCEL_TRACKER_EVENT_LOG) ++r->log;
    if (event == ACCEL_TRACKER_EVENT_FINISH) ++r->finish;
    r->last_step = step;
    snprintf(r->last_json, sizeof r->last_json, "%s", json);
    return r->answer;
}

static accel_accelerator_t *make(const char *dir, const char *log_with)
{
    char cfg[1024];
    accel_accelerator_t *acc = NULL;
    snprintf(cfg, sizeof cfg, "{\"log_with\": %s, \"project_config\": {\"project_dir\": \"%s\", \"logging_dir\": \"%s/logs\"}}",
             log_with, dir, dir);
    CHECK_OK(accel_accelerator_create(cfg, &acc));
    return acc;
}

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0, c;
    if (!f) return -1;
    while ((c = fgetc(f)) != EOF)
        if (c == '\n') ++n;
    fclose(f);
    return n;
}

/* The known run check_tensorboard.py expects: 5 steps of loss/lr, a text at step 2, nested "eval". */
static int write_run(const char *dir)
{
    struct recorder rec = {0, 0, 0, 0, "", ACCEL_OK};
    accel_accelerator_t *acc = make(dir, "\"all\"");
    char *info = NULL;
    int step;
    CHECK_OK(accel_accelerator_add_tracker(acc, "recorder", record, &rec));
    CHECK_OK(accel_accelerator_init_trackers(acc, "run1", "{\"lr\": 0.1, \"model\": \"mlp\"}",
                                             "{\"tensorboard\": {\"filename_suffix\": \".test\", \"flush_secs\": 0}}"));
    for (step = 0; step < 5; ++step) {
        char values[256];
        snprintf(values, sizeof values, "{\"loss\": %.6f, \"lr\": %.6f%s}", 1.0 / (step + 1), 0.1 * step,
                 step == 2 ? ", \"note\": \"half way\", \"eval\": {\"accuracy\": 0.5}" : "");
        CHECK_OK(accel_accelerator_log(acc, values, step));
    }
    CHECK_OK(accel_accelerator_get_tracker_json(acc, "tensorboard", &info));
    printf("TRACKER %s\n", info ? info : "");
    accel_string_free(info);
    CHECK_OK(accel_accelerator_end_training(acc));
    printf("CALLBACK init=%d log=%d finish=%d\n", rec.init, rec.log, rec.finish);
    accel_accelerator_free(acc);
    return capi_report("capi_test_tracking write");
}

static void test_errors_and_callbacks(const char *dir)
{
    struct recorder rec = {0, 0, 0, 0, "", ACCEL_OK};
    accel_accelerator_t *plain = NULL, *acc;
    char *out = (char *)1;
    char path[1024];

    /* No trackers configured: init has nothing to start and log does nothing (Accelerate); arguments are
     * still checked. */
    CHECK_OK(accel_accelerator_create(NULL, &plain));
    CHECK_OK(accel_accelerator_log(plain, "{\"loss\": 1}", 0));
    CHECK_FAILS(accel_accelerator_init_trackers(plain, "a/b", NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "project_name");
    CHECK_OK(accel_accelerator_init_trackers(plain, "p", "{\"lr\": 0.1}", NULL));
    CHECK_OK(accel_accelerator_log(plain, "{\"loss\": 1}", 0));
    CHECK_FAILS(accel_accelerator_log(plain, "[1]", 0), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK_OK(accel_accelerator_end_training(plain));
    accel_accelerator_free(plain);

    CHECK_FAILS(accel_accelerator_init_trackers(NULL, "p", NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_log(NULL, "{}", 0), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_end_training(NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");

    acc = make(dir, "[\"jsonl\", \"csv\"]");
    CHECK_FAILS(accel_accelerator_add_tracker(acc, NULL, record, &rec), ACCEL_ERR_INVALID_ARGUMENT, "name");
    CHECK_FAILS(accel_accelerator_add_tracker(acc, "r", NULL, &rec), ACCEL_ERR_INVALID_ARGUMENT, "fn");
    CHECK_FAILS(accel_accelerator_add_tracker(acc, "csv", record, &rec), ACCEL_ERR_INVALID_ARGUMENT, "csv");
    CHECK_OK(accel_accelerator_add_tracker(acc, "r", record, &rec));
    CHECK_FAILS(accel_accelerator_add_tracker(acc, "r", record, &rec), ACCEL_ERR_INVALID_ARGUMENT, "already exists");
    CHECK_FAILS(accel_accelerator_log(acc, "{\"loss\": 1}", 0), ACCEL_ERR_FAILED_PRECONDITION, "init_trackers was not called");
    CHECK_FAILS(accel_accelerator_get_tracker_json(acc, "csv", &out), ACCEL_ERR_FAILED_PRECONDITION, "init_trackers");
    CHECK(out == NULL);
    CHECK_FAILS(accel_accelerator_init_trackers(acc, NULL, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "project_name");
    CHECK_FAILS(accel_accelerator_init_trackers(acc, "a/b", NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "project_name");
    CHECK_FAILS(accel_accelerator_init_trackers(acc, "..", NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "project_name");
    CHECK_FAILS(accel_accelerator_init_trackers(acc, "p", "[1]", NULL), ACCEL_ERR_INVALID_ARGUMENT, "config_json");
    CHECK_FAILS(accel_accelerator_init_trackers(acc, "p", "{", NULL), ACCEL_ERR_INVALID_ARGUMENT, "config_json: malformed");
    CHECK_FAILS(accel_accelerator_init_trackers(acc, "p", NULL, "{\"tensorboard\": {}}"), ACCEL_ERR_INVALID_ARGUMENT,
                "init_kwargs_json.tensorboard: not an active tracker");
    CHECK_FAILS(accel_accelerator_init_trackers(acc, "p", NULL, "{\"csv\": {\"x\": 1}}"), ACCEL_ERR_INVALID_ARGUMENT,
                "init_kwargs_json.csv.x: unknown key");
    CHECK_OK(accel_accelerator_init_trackers(acc, "p", "{\"a\": 1}", "{\"r\": {\"entity\": \"me\"}}"));
    CHECK(rec.init == 1 && strstr(rec.last_json, "\"project_name\":\"p\"") && strstr(rec.last_json, "\"entity\":\"me\""));
    CHECK_FAILS(accel_accelerator_init_trackers(acc, "p", NULL, NULL), ACCEL_ERR_FAILED_PRECONDITION, "already called");
    CHECK_FAILS(accel_accelerator_add_tracker(acc, "late", record, &rec), ACCEL_ERR_FAILED_PRECONDITION, "init_trackers");
    CHECK_FAILS(accel_accelerator_log(acc, NULL, 0), ACCEL_ERR_INVALID_ARGUMENT, "values_json");
    CHECK_FAILS(accel_accelerator_log(acc, "[1]", 0), ACCEL_ERR_INVALID_ARGUMENT, "values_json");
    CHECK_FAILS(accel_accelerator_log(acc, "{}", 0), ACCEL_ERR_INVALID_ARGUMENT, "no values");
    CHECK_FAILS(accel_accelerator_log(acc, "{\"ok\": 1, \"bad\": [1, 2]}", 0), ACCEL_ERR_INVALID_ARGUMENT, "values_json.bad");
    CHECK_FAILS(accel_accelerator_log(acc, "{\"flag\": true}", 0), ACCEL_ERR_INVALID_ARGUMENT, "values_json.flag");
    CHECK_FAILS(accel_accelerator_log(acc, "{\"e\": {\"x\": null}}", 0), ACCEL_ERR_INVALID_ARGUMENT, "values_json.e.x");
    CHECK(rec.log == 0); /* nothing logged by a rejected call */
    CHECK_OK(accel_accelerator_log(acc, "{\"loss\": 0.25, \"msg\": \"a,\\\"b\\\"\"}", 7));
    CHECK(rec.log == 1 && rec.last_step == 7 && strstr(rec.last_json, "\"loss\":0.25"));
    rec.answer = ACCEL_ERR_UNAVAILABLE; /* the metrics service is down */
    CHECK_FAILS(accel_accelerator_log(acc, "{\"loss\": 0.5}", 8), ACCEL_ERR_UNAVAILABLE, "tracker \"r\"");
    rec.answer = ACCEL_OK;
    CHECK_FAILS(accel_accelerator_get_tracker_json(acc, "tensorboard", &out), ACCEL_ERR_NOT_FOUND, "no tracker named");
    CHECK_FAILS(accel_accelerator_get_tracker_json(acc, "csv", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_OK(accel_accelerator_get_tracker_json(acc, "csv", &out));
    CHECK(out && strstr(out, "\"main_process\":true") && strstr(out, "metrics.csv"));
    accel_string_free(out);
    CHECK_OK(accel_accelerator_get_tracker_json(acc, "r", &out));
    CHECK(out && strstr(out, "\"callback\":true"));
    accel_string_free(out);
    CHECK_OK(accel_accelerator_end_training(acc));
    CHECK(rec.finish == 1);
    CHECK_OK(accel_accelerator_end_training(acc)); /* nothing left to finish */
    CHECK(rec.finish == 1);

    snprintf(path, sizeof path, "%s/logs/p/metrics.jsonl", dir);
    CHECK(count_lines(path) == 3); /* config, the log at step 7, the log at step 8 (written before the callback failed) */
    snprintf(path, sizeof path, "%s/logs/p/metrics.csv", dir);
    CHECK(count_lines(path) == 1 + 2 + 1); /* header, step 7's two values, step 8 */
    /* init again after end_training: the files are appended to */
    CHECK_OK(accel_accelerator_init_trackers(acc, "p", NULL, NULL));
    CHECK_OK(accel_accelerator_log(acc, "{\"loss\": 0.125}", 9));
    accel_accelerator_free(acc); /* finishes the trackers */
    snprintf(path, sizeof path, "%s/logs/p/metrics.jsonl", dir);
    CHECK(count_lines(path) == 5);
    CHECK(rec.finish == 2);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/accel_tracking_XXXXXX";
    if (argc == 3 && strcmp(argv[1], "write") == 0) return write_run(argv[2]);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_errors_and_callbacks(dir);
    {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    return capi_report("capi_test_tracking");
}
