/*
 * accel against the real Python Accelerate 0.24.1 (a program, not a test; see BENCHMARKS.md, "accel vs Python
 * Accelerate"). bench/vs_accelerate.sh runs it and bench/vs_accelerate.py, the same training in Accelerate,
 * alternately.
 *
 *   vs_accelerate [STEPS] [WARMUP]
 *
 * Trains an MLP (widths 512,1024,1024,10, AdamW lr 1e-4 weight decay 0.01, batch 64 per process, fp32) on
 * the data vs_accelerate.py builds from the same formula, through the C API (prepare, then train_step: forward,
 * cross entropy, backward, step, zero_grad), and prints on the main process `steps/s X` for the STEPS steps
 * after WARMUP, timed as a whole (the data loader's next batch included, as in the Python loop).
 * ACCEL_BENCH_DETERMINISTIC=1 seeds with set_seed(0, deterministic=true) (LibTorch's deterministic algorithms), to
 * measure what that mode costs.
 */
#include "bench_common.h"

#include <string.h>

enum { IN = 512, OUT = 10, BATCH = 64 };

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 300, warmup = argc > 2 ? atoi(argv[2]) : 10;
    if (steps < 1 || warmup < 0) {
        fprintf(stderr, "usage: vs_accelerate [STEPS >= 1] [WARMUP >= 0]\n");
        return 2;
    }
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *features = NULL, *labels = NULL;
    int32_t world = 1, rank = 0;

    const char *det = getenv("ACCEL_BENCH_DETERMINISTIC");
    CHECK(accel_random_set_seed(0, false, det != NULL && strcmp(det, "1") == 0));
    CHECK(accel_accelerator_create(NULL, &acc));
    CHECK(accel_accelerator_get_num_processes(acc, &world));
    CHECK(accel_accelerator_get_process_index(acc, &rank));
    /* Every rank holds the whole data set; the prepared loader gives each its share, as Accelerate's does. */
    const int64_t n = (int64_t)BATCH * world * (steps + warmup);
    float *x = malloc((size_t)n * IN * sizeof(float));
    int64_t *y = malloc((size_t)n * sizeof(int64_t));
    if (x == NULL || y == NULL) {
        fprintf(stderr, "out of memory for %lld samples\n", (long long)n);
        return 1;
    }
    for (int64_t i = 0; i < n * IN; ++i) x[i] = (float)((i * 7919 % 1000) / 1000.0 - 0.5);
    for (int64_t i = 0; i < n; ++i) y[i] = i % OUT;
    int64_t xs[2] = {n, IN}, ys[1] = {n};
    char dl_config[96];
    snprintf(dl_config, sizeof dl_config, "{\"batch_size\": %d, \"shuffle\": false}", BATCH);
    CHECK(accel_tensor_create(x, (size_t)n * IN * sizeof(float), ACCEL_DTYPE_FLOAT32, xs, 2, &features));
    CHECK(accel_tensor_create(y, (size_t)n * sizeof(int64_t), ACCEL_DTYPE_INT64, ys, 1, &labels));
    CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [512, 1024, 1024, 10]}", &model));
    CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.0001, \"weight_decay\": 0.01}", &opt));
    CHECK(accel_dataloader_create_from_tensors(features, labels, dl_config, &dl));
    CHECK(accel_accelerator_prepare(acc, model, opt, dl, NULL));

    double t0 = 0.0, loss = 0.0;
    int done = 0;
    for (int i = 0; i < steps + warmup; ++i) {
        if (i == warmup) t0 = now();
        accel_batch_t *b = NULL;
        CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        CHECK(accel_accelerator_train_step(acc, model, opt, NULL, b, "cross_entropy", &loss));
        accel_batch_free(b);
        if (i >= warmup) ++done;
    }
    double seconds = now() - t0;
    if (rank == 0)
        printf("accel processes %d steps %d seconds %.3f steps/s %.2f last loss %.4f\n", (int)world, done, seconds,
               done / seconds, loss);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(features);
    accel_tensor_free(labels);
    accel_accelerator_free(acc);
    free(x);
    free(y);
    return 0;
}
