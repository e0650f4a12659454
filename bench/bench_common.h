/* What the C benchmarks share: a status check that stops the program, a monotonic clock and a comparison for
 * qsort (medians). */
#ifndef ACCEL_BENCH_COMMON_H
#define ACCEL_BENCH_COMMON_H

#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                                        \
    do {                                                                                                   \
        accel_status_t st_ = (call);                                                                       \
        if (st_ != ACCEL_OK) {                                                                             \
            fprintf(stderr, "%s: %s: %s\n", #call, accel_status_name(st_), accel_last_error_message());    \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

static inline double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A field of /proc/self/status ("VmRSS:", "VmHWM:"), in MiB; -1 when unreadable. */
static inline double status_mib(const char *key)
{
    char line[256];
    double kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, strlen(key)) == 0) kb = atof(line + strlen(key));
    fclose(f);
    return kb / 1024.0;
}

/* The resident set now and its peak so far, in bytes (/proc/self/statm, getrusage). */
static inline long long rss_bytes(void)
{
    long long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%lld %lld", &pages, &resident) != 2) resident = -1;
    if (f) fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static inline long long peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)ru.ru_maxrss * 1024;
}

/* Restarts VmHWM (status_mib("VmHWM:")) from the current resident set: writing 5 to clear_refs resets the peak. */
static inline void reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f != NULL) {
        fputs("5", f);
        fclose(f);
    }
}

/* The parallelism benchmarks' token stream: n ids below `vocab`, the same on every rank. */
static inline int64_t *bench_tokens(int64_t n, int64_t vocab)
{
    int64_t *tokens = (int64_t *)malloc((size_t)n * sizeof *tokens);
    if (tokens == NULL) {
        fprintf(stderr, "out of memory for %lld tokens\n", (long long)n);
        exit(1);
    }
    for (int64_t i = 0; i < n; ++i) tokens[i] = (i * 7 + i / 13 + (i * i) % 29) % vocab;
    return tokens;
}

/* The parallelism benchmarks' setup (the same seed on every rank, so every rank builds the same weights): an
 * accelerator from `config` (NULL: the launcher's environment), a model from `spec` with the optimizer `optimizer`,
 * and a loader of `block`-token windows, `batch` to a batch, over bench_tokens(n, vocab); all prepared together.
 * bench_lm_free releases them. */
typedef struct {
    accel_accelerator_t *acc;
    accel_model_t *model;
    accel_optimizer_t *opt;
    accel_dataloader_t *dl;
    accel_tensor_t *stream;
    int64_t *tokens;
    int32_t rank, world;
} BenchLm;

static inline BenchLm bench_prepare_lm(const char *config, const char *spec, const char *optimizer, int block,
                                       int batch, int64_t n, int64_t vocab)
{
    BenchLm lm = {NULL, NULL, NULL, NULL, NULL, bench_tokens(n, vocab), 0, 1};
    char dl_config[128];
    snprintf(dl_config, sizeof dl_config, "{\"block_size\": %d, \"batch_size\": %d}", block, batch);
    int64_t shape[1] = {n};
    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(config, &lm.acc));
    CHECK(accel_accelerator_get_process_index(lm.acc, &lm.rank));
    CHECK(accel_accelerator_get_num_processes(lm.acc, &lm.world));
    CHECK(accel_model_create_from_json(spec, &lm.model));
    CHECK(accel_optimizer_create(lm.model, optimizer, &lm.opt));
    CHECK(accel_tensor_create(lm.tokens, (size_t)n * sizeof *lm.tokens, ACCEL_DTYPE_INT64, shape, 1, &lm.stream));
    CHECK(accel_dataloader_create_from_tokens(lm.stream, dl_config, &lm.dl));
    CHECK(accel_accelerator_prepare(lm.acc, lm.model, lm.opt, lm.dl, NULL));
    return lm;
}

/* One causal-LM train_step on the loader's next batch; returns its loss. */
static inline double bench_lm_step(const BenchLm *lm)
{
    accel_batch_t *b = NULL;
    double loss = 0.0;
    CHECK(accel_dataloader_next(lm->dl, &b));
    if (b == NULL) {
        fprintf(stderr, "the loader ran out of batches\n");
        exit(1);
    }
    CHECK(accel_accelerator_train_step(lm->acc, lm->model, lm->opt, NULL, b, "causal_lm", &loss));
    accel_batch_free(b);
    return loss;
}

static inline void bench_lm_free(BenchLm *lm)
{
    accel_dataloader_free(lm->dl);
    accel_tensor_free(lm->stream);
    accel_optimizer_free(lm->opt);
    accel_model_free(lm->model);
    accel_accelerator_free(lm->acc);
    free(lm->tokens);
}

/* The checkpoint and offload benchmarks' workload: an MLP of four 2048 x 2048 layers (16.8 M parameters)
 * with AdamW (lr 1e-4), prepared by `acc`, and a fixed batch of 16 samples (inputs depend on `rank`). */
typedef struct {
    accel_model_t *model;
    accel_optimizer_t *opt;
    accel_tensor_t *in, *lab;
} BenchMlp;

static inline BenchMlp bench_mlp(accel_accelerator_t *acc, int32_t rank)
{
    enum { W = 2048, BATCH = 16 };
    BenchMlp m = {NULL, NULL, NULL, NULL};
    CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2048, 2048, 2048, 2048, 2048]}", &m.model));
    CHECK(accel_optimizer_create(m.model, "{\"type\": \"adamw\", \"lr\": 0.0001}", &m.opt));
    CHECK(accel_accelerator_prepare(acc, m.model, m.opt, NULL, NULL));
    float *x = (float *)malloc((size_t)BATCH * W * sizeof(float));
    int64_t y[BATCH];
    for (int64_t i = 0; i < (int64_t)BATCH * W; ++i) x[i] = (float)(((i + rank) * 7919 % 1000) / 1000.0 - 0.5);
    for (int i = 0; i < BATCH; ++i) y[i] = i % 10;
    int64_t xs[2] = {BATCH, W}, ys[1] = {BATCH};
    CHECK(accel_tensor_create(x, (size_t)BATCH * W * sizeof(float), ACCEL_DTYPE_FLOAT32, xs, 2, &m.in));
    CHECK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &m.lab));
    free(x);
    return m;
}

/* One training step (forward, loss, backward, optimizer step, zero_grad); returns its seconds. */
static inline double bench_mlp_step(accel_accelerator_t *acc, const BenchMlp *m)
{
    accel_tensor_t *out = NULL, *loss = NULL;
    double t0 = now();
    CHECK(accel_model_forward(m->model, m->in, &out));
    CHECK(accel_loss_compute("cross_entropy", out, m->lab, &loss));
    CHECK(accel_accelerator_backward(acc, loss));
    CHECK(accel_optimizer_step(m->opt));
    CHECK(accel_optimizer_zero_grad(m->opt));
    accel_tensor_free(out);
    accel_tensor_free(loss);
    return now() - t0;
}

static inline void bench_mlp_free(BenchMlp *m)
{
    accel_tensor_free(m->in);
    accel_tensor_free(m->lab);
    accel_optimizer_free(m->opt);
    accel_model_free(m->model);
}

#endif
