/*
 * dist_kill VICTIM_RANK TIMEOUT_SECONDS
 *
 * Every rank all-reduces in a loop; VICTIM_RANK kills itself (SIGKILL) after a few rounds. The
 * survivors must get ACCEL_ERR_UNAVAILABLE or ACCEL_ERR_DEADLINE_EXCEEDED from the collective with a
 * message naming a rank, and exit with status 3 ("failed as expected"); any other outcome exits 1.
 */
#include "dist_common.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dist_kill VICTIM TIMEOUT\n");
        return 2;
    }
    int victim = atoi(argv[1]);
    char cfg[128];
    snprintf(cfg, sizeof cfg, "{\"kwargs_handlers\": {\"init_process_group\": {\"timeout\": %s}}}", argv[2]);
    accel_accelerator_t *acc = NULL;
    DIST_CHECK(accel_accelerator_create(cfg, &acc));
    int32_t r = 0;
    DIST_CHECK(accel_accelerator_get_process_index(acc, &r));
    float v[1024];
    for (int i = 0; i < 1024; ++i) v[i] = 1.0f;
    accel_tensor_t *t = dist_tensor_f32(v, 1024);
    for (int round = 0; round < 1000; ++round) {
        if (r == victim && round == 5) {
            fprintf(stderr, "rank %d: killing myself\n", r);
            fflush(stderr);
            raise(SIGKILL);
        }
        accel_tensor_t *out = NULL;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        accel_status_t st = accel_accelerator_reduce(acc, t, "sum", &out);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (st != ACCEL_OK) {
            double waited = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
            const char *msg = accel_last_error_message();
            printf("rank %d: round %d failed after %.1f s: %s: %s\n", r, round, waited, accel_status_name(st), msg);
            fflush(stdout);
            int named = strstr(msg, "rank") != NULL;
            /* a second call repeats the first cause */
            accel_status_t again = accel_accelerator_reduce(acc, t, "sum", &out);
            printf("rank %d: next call: %s: %s\n", r, accel_status_name(again), accel_last_error_message());
            fflush(stdout);
            int ok = (st == ACCEL_ERR_UNAVAILABLE || st == ACCEL_ERR_DEADLINE_EXCEEDED) && named &&
                     again == ACCEL_ERR_ABORTED;
            _exit(ok ? 3 : 1); /* no clean shutdown with a dead peer */
        }
        accel_tensor_free(out);
        usleep(20000);
    }
    fprintf(stderr, "rank %d: the victim never failed the collective\n", r);
    return 1;
}
