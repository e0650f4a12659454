/*
 * dist_log FILE
 *
 * accel/log.h on P processes (accel launch, Gloo; ACCELERATE_LOG_LEVEL=INFO): every message reaches a callback
 * that appends one line to FILE; then rank 0 reads FILE back and checks that main_process_only messages came
 * from rank 0 only, that DEBUG ones were dropped, that in_order messages came in rank order each round although
 * rank 0 is the slowest to call, and that the others came from every rank. Then the default sink's line on
 * standard error ("[rank<r>] <name>: <level>: <message>"), and in_order without an accelerator refused.
 * Prints "log: ok rank r of P".
 */
#define _POSIX_C_SOURCE 200809L
#include "dist_common.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 3

static void append_line(void *user_data, accel_log_level_t level, const char *name, int32_t process_index,
                        const char *message)
{
    char line[512];
    int n = snprintf(line, sizeof line, "r=%d l=%d n=%s m=%s\n", (int)process_index, (int)level, name, message);
    int fd = open((const char *)user_data, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n) {
        fprintf(stderr, "dist_log: cannot append to %s\n", (const char *)user_data);
        exit(1);
    }
    close(fd);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    DIST_EXPECT(f != NULL, "cannot read %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) ++n;
    return n;
}

static void check_file(const char *path, int32_t p)
{
    const char *text = read_all(path);
    char want[128];
    DIST_EXPECT(count(text, "m=main only\n") == 1 && count(text, "r=0 l=20 n=train m=main only\n") == 1,
                "main_process_only: expected one line from rank 0:\n%s", text);
    DIST_EXPECT(strstr(text, "hidden") == NULL, "a DEBUG message got through at INFO:\n%s", text);
    DIST_EXPECT(count(text, "m=every rank\n") == p, "expected %d 'every rank' lines:\n%s", (int)p, text);
    /* The in_order lines, in the order written: round by round, rank 0 first. */
    const char *at = text;
    for (int round = 0; round < ROUNDS; ++round)
        for (int32_t r = 0; r < p; ++r) {
            snprintf(want, sizeof want, "r=%d l=30 n=train m=in order %d\n", (int)r, round);
            const char *found = strstr(at, want);
            DIST_EXPECT(found != NULL, "in_order: '%.*s' missing or out of order:\n%s", (int)strlen(want) - 1, want,
                        text);
            at = found + strlen(want);
        }
}

/* The default sink: one line on standard error, read back from a file standard error is sent to. */
static void check_default_sink(accel_accelerator_t *acc, int32_t r, const char *path)
{
    char err_path[512], want[128];
    snprintf(err_path, sizeof err_path, "%s.stderr%d", path, (int)r);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    DIST_EXPECT(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2, "cannot redirect standard error");
    accel_log_set_callback(NULL, NULL);
    accel_status_t st = accel_log_write(acc, "train", ACCEL_LOG_WARNING, "plain", false, false);
    fflush(stderr);
    dup2(saved, 2);
    close(fd);
    close(saved);
    DIST_CHECK(st);
    snprintf(want, sizeof want, "[rank%d] train: warning: plain\n", (int)r);
    const char *text = read_all(err_path);
    DIST_EXPECT(strcmp(text, want) == 0, "standard error holds '%s', expected '%s'", text, want);
    unlink(err_path);
}

int main(int argc, char **argv)
{
    DIST_EXPECT(argc == 2, "usage: dist_log FILE");
    const char *path = argv[1];
    accel_accelerator_t *acc = NULL;
    int32_t r = 0, p = 0;
    accel_log_level_t level = 0;
    DIST_CHECK(accel_accelerator_create(NULL, &acc));
    DIST_CHECK(accel_accelerator_get_process_index(acc, &r));
    DIST_CHECK(accel_accelerator_get_num_processes(acc, &p));
    DIST_EXPECT(p > 1, "run under accel launch -n 2 or more");
    DIST_CHECK(accel_log_get_level(&level));
    DIST_EXPECT(level == ACCEL_LOG_INFO, "ACCELERATE_LOG_LEVEL=INFO gave level %d", (int)level);
    if (r == 0) unlink(path); /* a previous run's */
    DIST_CHECK(accel_accelerator_wait_for_everyone(acc));

    accel_log_set_callback(append_line, (void *)path);
    DIST_CHECK(accel_log_write(acc, "train", ACCEL_LOG_INFO, "main only", true, false));
    DIST_CHECK(accel_log_write(acc, "train", ACCEL_LOG_DEBUG, "hidden", false, false));
    char message[64];
    for (int round = 0; round < ROUNDS; ++round) {
        /* Rank 0 comes last to the call: without the barriers the others' lines would come first. */
        if (r == 0) {
            struct timespec pause = {0, 300 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        snprintf(message, sizeof message, "in order %d", round);
        DIST_CHECK(accel_log_write(acc, "train", ACCEL_LOG_WARNING, message, false, true));
    }
    DIST_CHECK(accel_log_write(acc, "train", ACCEL_LOG_WARNING, "every rank", false, false));
    DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
    if (r == 0) check_file(path, p);

    /* in_order needs the accelerator's barrier when there are several processes. */
    accel_status_t st = accel_log_write(NULL, "train", ACCEL_LOG_WARNING, "x", false, true);
    DIST_EXPECT(st == ACCEL_ERR_FAILED_PRECONDITION && strstr(accel_last_error_message(), "in_order") != NULL,
                "in_order without an accelerator: %s %s", accel_status_name(st), accel_last_error_message());

    check_default_sink(acc, r, path);
    DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
    accel_accelerator_free(acc);
    printf("log: ok rank %d of %d\n", (int)r, (int)p);
    return 0;
}
