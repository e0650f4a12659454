/*
 * Sharded checkpoint benchmark (a program, not a test; bench/shard_ckpt.sh runs it with SHARDED_STATE_DICT
 * and FULL_STATE_DICT on 2 processes and times dd on the same bytes; see BENCHMARKS.md, "Sharded
 * checkpoints").
 *
 *   shard_ckpt DIR ROUNDS '<accelerator config JSON>'
 *
 * An MLP of four 2048 x 2048 layers (16.8 M parameters, 67 MB of fp32 weights) with AdamW after one step
 * (201 MB of model and optimizer state), FULL_SHARD. Each round: save_state(DIR), then load_state(DIR), each
 * timed on every rank between barriers. Every rank prints one line:
 *   shard_ckpt rank R median_save_ms S median_load_ms L
 */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: shard_ckpt DIR ROUNDS CONFIG\n");
        return 2;
    }
    const char *dir = argv[1], *config = argv[3];
    const int rounds = atoi(argv[2]);
    accel_accelerator_t *acc = NULL;
    int32_t rank = 0;
    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(config, &acc));
    CHECK(accel_accelerator_get_process_index(acc, &rank));
    BenchMlp m = bench_mlp(acc, rank);
    bench_mlp_step(acc, &m); /* one step, so that the optimizer has its state */

    double *save = malloc((size_t)rounds * sizeof(double)), *load = malloc((size_t)rounds * sizeof(double));
    for (int i = 0; i < rounds; ++i) {
        CHECK(accel_accelerator_wait_for_everyone(acc));
        double t0 = now();
        CHECK(accel_accelerator_save_state(acc, dir));
        CHECK(accel_accelerator_wait_for_everyone(acc));
        double t1 = now();
        CHECK(accel_accelerator_load_state(acc, dir));
        CHECK(accel_accelerator_wait_for_everyone(acc));
        double t2 = now();
        save[i] = (t1 - t0) * 1e3;
        load[i] = (t2 - t1) * 1e3;
    }
    qsort(save, (size_t)rounds, sizeof(double), cmp);
    qsort(load, (size_t)rounds, sizeof(double), cmp);
    printf("shard_ckpt rank %d median_save_ms %.1f median_load_ms %.1f\n", rank, save[rounds / 2], load[rounds / 2]);
    fflush(stdout);
    free(save);
    free(load);
    bench_mlp_free(&m);
    accel_accelerator_free(acc);
    return 0;
}
