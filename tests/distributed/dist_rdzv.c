/*
 * dist_rdzv STOP_FILE TIMEOUT_SECONDS
 *
 * The job the rendezvous test (run_rdzv.py) attacks: every rank prints "ready", then all-reduces {1, stop} in
 * rounds 20 ms apart, where stop is 1 on rank 0 once STOP_FILE exists; every sum is checked (world size, and the
 * same stop on every rank), so a store disturbed by a stranger shows as a failure or a wrong sum. Ends when the
 * stop arrives (or after 3000 rounds) with "rank R: done after N rounds, every sum right" and status 0. A process
 * whose accelerator cannot be created (a refused token) prints the status and message and exits 3.
 */
#include "dist_common.h"

#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dist_rdzv STOP_FILE TIMEOUT\n");
        return 2;
    }
    char cfg[128];
    snprintf(cfg, sizeof cfg, "{\"kwargs_handlers\": {\"init_process_group\": {\"timeout\": %s}}}", argv[2]);
    accel_accelerator_t *acc = NULL;
    accel_status_t st = accel_accelerator_create(cfg, &acc);
    if (st != ACCEL_OK) {
        printf("create failed: %s: %s\n", accel_status_name(st), accel_last_error_message());
        fflush(stdout);
        return 3;
    }
    int32_t r = 0, n = 0;
    DIST_CHECK(accel_accelerator_get_process_index(acc, &r));
    DIST_CHECK(accel_accelerator_get_num_processes(acc, &n));
    printf("rank %d: ready\n", r);
    fflush(stdout);
    int round = 0;
    for (; round < 3000; ++round) {
        float v[2] = {1.0f, (r == 0 && access(argv[1], F_OK) == 0) ? 1.0f : 0.0f};
        accel_tensor_t *t = dist_tensor_f32(v, 2), *out = NULL;
        DIST_CHECK(accel_accelerator_reduce(acc, t, "sum", &out));
        float got[2] = {0, 0};
        DIST_CHECK(accel_tensor_copy_to_buffer(out, got, sizeof got));
        DIST_EXPECT(got[0] == (float)n, "round %d: sum %g, expected %d", round, got[0], n);
        accel_tensor_free(t);
        accel_tensor_free(out);
        if (got[1] > 0.0f) break;
        usleep(20000);
    }
    printf("rank %d: done after %d rounds, every sum right\n", r, round + 1);
    accel_accelerator_free(acc);
    return 0;
}
