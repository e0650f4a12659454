/*
 * Distributed benchmark (a program, not a test; see BENCHMARKS.md, "Distributed").
 *
 *   dist_step [STEPS] [WARMUP] ['<accelerator config JSON>']
 *
 * Trains the medium MLP (widths 1024,1024,1024,10, AdamW, batch 64 per process) and prints the median
 * step time. Started as several processes it also prints, in the same run:
 *  - DDP gradient sync throughput during the real backward passes: bucket bytes / the time at least
 *    one bucket was in flight (launch -> reduced), and, for the overlap, the whole window from the first
 *    launch to the last bucket reduced (which includes the backward compute between launches);
 *  - raw allreduce throughput of the same bucket sizes, back to back, through the same communicator
 *    (accel_accelerator_reduce);
 * and their ratio. Run it once alone and once under `accel launch -n 2` / `mpirun -np 2` to get the
 * 2-process vs 1-process step time (bench/dist_bench.sh does both, interleaved).
 */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { IN = 1024, OUT = 10, BATCH = 64 };

/* The number after `"key": ` in a flat JSON text. */
static double json_number(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    return p ? atof(p + strlen(pat)) : 0.0;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 30, warmup = argc > 2 ? atoi(argv[2]) : 5;
    const char *config = argc > 3 ? argv[3] : NULL;
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *features = NULL, *labels = NULL;
    int32_t world = 1, rank = 0;

    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(config, &acc));
    CHECK(accel_accelerator_get_num_processes(acc, &world));
    CHECK(accel_accelerator_get_process_index(acc, &rank));
    const int64_t n = (int64_t)BATCH * world * (steps + warmup);
    float *x = malloc((size_t)n * IN * sizeof(float));
    int64_t *y = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n * IN; ++i) x[i] = (float)((i * 7919 % 1000) / 1000.0 - 0.5);
    for (int64_t i = 0; i < n; ++i) y[i] = i % OUT;
    int64_t xs[2] = {n, IN}, ys[1] = {n};
    char dl_config[96];
    snprintf(dl_config, sizeof dl_config, "{\"batch_size\": %d, \"shuffle\": false}", BATCH);
    CHECK(accel_tensor_create(x, (size_t)n * IN * sizeof(float), ACCEL_DTYPE_FLOAT32, xs, 2, &features));
    CHECK(accel_tensor_create(y, (size_t)n * sizeof(int64_t), ACCEL_DTYPE_INT64, ys, 1, &labels));
    CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [1024, 1024, 1024, 10]}", &model));
    CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.0001}", &opt));
    CHECK(accel_dataloader_create_from_tensors(features, labels, dl_config, &dl));
    CHECK(accel_accelerator_prepare(acc, model, opt, dl, NULL));

    double *times = malloc((size_t)steps * sizeof(double));
    int k = 0;
    char *stats_before = NULL;
    for (int i = 0; i < steps + warmup; ++i) {
        accel_batch_t *b = NULL;
        CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        if (i == warmup) CHECK(accel_accelerator_get_ddp_stats_json(acc, &stats_before));
        double t0 = now();
        CHECK(accel_accelerator_train_step(acc, model, opt, NULL, b, "cross_entropy", NULL));
        double t1 = now();
        if (i >= warmup) times[k++] = (t1 - t0) * 1e3;
        accel_batch_free(b);
    }
    qsort(times, (size_t)k, sizeof(double), cmp);
    const char *backend = NULL;
    CHECK(accel_accelerator_get_distributed_backend(acc, &backend));
    if (rank == 0) printf("processes %d backend %s: median step %.2f ms (%d steps)\n", world, backend, times[k / 2], k);

    if (world > 1) {
        char *stats = NULL;
        CHECK(accel_accelerator_get_ddp_stats_json(acc, &stats));
        double bytes = json_number(stats, "bucket_bytes");
        double syncs = json_number(stats, "syncs") - json_number(stats_before, "syncs");
        double sync_s = json_number(stats, "sync_seconds") - json_number(stats_before, "sync_seconds");
        double wait_s = json_number(stats, "wait_seconds") - json_number(stats_before, "wait_seconds");
        double busy_s = json_number(stats, "busy_seconds") - json_number(stats_before, "busy_seconds");
        /* bucket sizes, to all-reduce the same buffers raw */
        int64_t sizes[64];
        int nb = 0;
        const char *p = strstr(stats, "\"bucket_sizes\": [");
        if (p) {
            p += strlen("\"bucket_sizes\": [");
            while (*p && *p != ']' && nb < 64) {
                sizes[nb++] = strtoll(p, (char **)&p, 10);
                while (*p == ',' || *p == ' ') ++p;
            }
        }
        accel_tensor_t *bufs[64];
        for (int i = 0; i < nb; ++i) {
            int64_t elems = sizes[i] / 4;
            float *data = calloc((size_t)elems, sizeof(float));
            CHECK(accel_tensor_create(data, (size_t)elems * sizeof(float), ACCEL_DTYPE_FLOAT32, &elems, 1, &bufs[i]));
            free(data);
        }
        double *raw = malloc((size_t)steps * sizeof(double));
        for (int r = 0; r < steps; ++r) {
            CHECK(accel_accelerator_wait_for_everyone(acc));
            double t0 = now();
            for (int i = 0; i < nb; ++i) {
                accel_tensor_t *out = NULL;
                CHECK(accel_accelerator_reduce(acc, bufs[i], "sum", &out));
                accel_tensor_free(out);
            }
            raw[r] = now() - t0;
        }
        qsort(raw, (size_t)steps, sizeof(double), cmp);
        double ddp_rate = syncs > 0 ? bytes * syncs / busy_s : 0.0;
        double raw_rate = bytes / raw[steps / 2];
        if (rank == 0) {
            printf("ddp buckets: %d, %.2f MB per sync; in flight %.2f ms/step, window first launch -> last reduced "
                   "%.2f ms/step, wait after backward %.2f ms/step\n",
                   nb, bytes / 1e6, 1e3 * busy_s / syncs, 1e3 * sync_s / syncs, 1e3 * wait_s / syncs);
            printf("gradient sync: ddp %.3f GB/s, raw allreduce of the same buckets %.3f GB/s (%.2f ms), ratio %.1f %%\n",
                   ddp_rate / 1e9, raw_rate / 1e9, 1e3 * raw[steps / 2], 100.0 * ddp_rate / raw_rate);
        }
        for (int i = 0; i < nb; ++i) accel_tensor_free(bufs[i]);
        free(raw);
        accel_string_free(stats);
    }
    accel_string_free(stats_before);
    free(times);
    free(x);
    free(y);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(features);
    accel_tensor_free(labels);
    accel_accelerator_free(acc);
    return 0;
}
