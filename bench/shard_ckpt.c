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
    enum { W = 2048, BATCH = 16 };
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    int32_t rank = 0;
    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(config, &acc));
    CHECK(accel_accelerator_get_process_index(acc, &rank));
    CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2048, 2048, 2048, 2048, 2048]}", &model));
    CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.0001}", &opt));
    CHECK(accel_accelerator_prepare(acc, model, opt, NULL, NULL));

    /* one step, so that the optimizer has its state */
    float *x = malloc((size_t)BATCH * W * sizeof(float));
    int64_t y[BATCH];
    for (int64_t i = 0; i < (int64_t)BATCH * W; ++i) x[i] = (float)(((i + rank) * 7919 % 1000) / 1000.0 - 0.5);
    for (int i = 0; i < BATCH; ++i) y[i] = i % 10;
    int64_t xs[2] = {BATCH, W}, ys[1] = {BATCH};
    accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
    CHECK(accel_tensor_create(x, (size_t)BATCH * W * sizeof(float), ACCEL_DTYPE_FLOAT32, xs, 2, &in));
    CHECK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &lab));
    CHECK(accel_model_forward(model, in, &out));
    CHECK(accel_loss_compute("cross_entropy", out, lab, &loss));
    CHECK(accel_accelerator_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    CHECK(accel_optimizer_zero_grad(opt));

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
    free(x);
    accel_tensor_free(out);
    accel_tensor_free(loss);
    accel_tensor_free(in);
    accel_tensor_free(lab);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
