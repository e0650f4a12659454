/* A slow dataset written by the caller (issue 35): batches/s of a map-style callback dataset whose get sleeps
 * `us` microseconds per sample (a database or network read), with 0, 2 and 4 worker threads, and the ratio to
 * 0 workers. Also a fast in-memory callback (no sleep) for the per-sample overhead of the callback path.
 *   bench_loader_callbacks [sleep_us=2000] [samples=256] [batch=8]   -> one line per configuration */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"

#include <string.h>

static int sleep_us = 2000;

static accel_status_t length(void *ud, int64_t *out)
{
    *out = *(int64_t *)ud;
    return ACCEL_OK;
}

static accel_status_t get(void *ud, int64_t index, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    float x[64];
    int64_t shape = 64, y = index % 10;
    int i;
    (void)ud;
    if (sleep_us > 0) {
        struct timespec ts = {sleep_us / 1000000, (long)(sleep_us % 1000000) * 1000L};
        nanosleep(&ts, NULL);
    }
    for (i = 0; i < 64; ++i) x[i] = (float)(index + i);
    if (accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, &shape, 1, inputs) != ACCEL_OK) return ACCEL_ERR_INTERNAL;
    return accel_tensor_create(&y, sizeof y, ACCEL_DTYPE_INT64, NULL, 0, labels);
}

/* Batches per second over `passes` passes (the first pass is a warm-up, not timed). */
static double batches_per_s(int64_t n, int batch, int workers, int passes)
{
    char config[160];
    accel_map_dataset_t d;
    accel_dataloader_t *dl = NULL;
    accel_batch_t *b = NULL;
    long count = 0;
    double t0 = 0;
    int p;
    d.length = length;
    d.get = get;
    d.release = NULL;
    d.user_data = &n;
    snprintf(config, sizeof config, "{\"batch_size\": %d, \"shuffle\": true, \"seed\": 1, \"num_workers\": %d}", batch, workers);
    CHECK(accel_dataloader_create_from_map_dataset(&d, NULL, NULL, config, &dl));
    for (p = 0; p <= passes; ++p) {
        if (p == 1) t0 = now();
        for (;;) {
            CHECK(accel_dataloader_next(dl, &b));
            if (b == NULL) break;
            if (p > 0) ++count;
            accel_batch_free(b);
        }
    }
    accel_dataloader_free(dl);
    return (double)count / (now() - t0);
}

int main(int argc, char **argv)
{
    const int64_t n = argc > 2 ? atoll(argv[2]) : 256;
    const int batch = argc > 3 ? atoi(argv[3]) : 8;
    const int workers[3] = {0, 2, 4};
    double base = 0;
    int k;
    sleep_us = argc > 1 ? atoi(argv[1]) : 2000;
    for (k = 0; k < 3; ++k) {
        double r = batches_per_s(n, batch, workers[k], 2);
        if (k == 0) base = r;
        printf("callback dataset, get sleeps %d us/sample, batch %d: %d workers %.1f batches/s (x%.2f)\n", sleep_us, batch,
               workers[k], r, r / base);
    }
    sleep_us = 0;
    printf("callback dataset, no sleep (in-memory), batch %d: 0 workers %.0f batches/s\n", batch,
           batches_per_s(n * 8, batch, 0, 3));
    return 0;
}
