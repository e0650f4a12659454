/* accelerator.profile()'s cost on a training step: the same MLP step (dataloader_next + train_step) with no
 * profile, inside a profile with the default ProfileKwargs, and inside one with record_shapes, profile_memory and
 * with_flops; rounds interleaved, medians of ms/step printed with the ratios to no profile, plus the time
 * profile_end takes to write the trace.
 *
 *   bench_profile_overhead [rounds] [steps_per_round] [width] [batch]     (defaults 7 20 256 32)
 */
#include "bench_common.h"

#include <string.h>
#include <unistd.h>

typedef struct {
    accel_accelerator_t *acc;
    accel_model_t *model;
    accel_optimizer_t *opt;
    accel_dataloader_t *dl;
} Setup;

static Setup make_setup(const char *profile, int64_t width, int64_t batch)
{
    Setup s;
    char json[512];
    snprintf(json, sizeof json, "{\"kwargs_handlers\": {\"profile\": %s}}", profile);
    CHECK(accel_accelerator_create(json, &s.acc));
    snprintf(json, sizeof json, "{\"type\": \"mlp\", \"widths\": [%lld, %lld, %lld, 10]}", (long long)width,
             (long long)width, (long long)width);
    CHECK(accel_model_create_from_json(json, &s.model));
    CHECK(accel_optimizer_create(s.model, "{\"type\": \"adamw\", \"lr\": 1e-4}", &s.opt));
    const int64_t n = batch * 64;
    float *x = malloc((size_t)(n * width) * sizeof(float)), *y = malloc((size_t)(n * 10) * sizeof(float));
    for (int64_t i = 0; i < n * width; ++i) x[i] = (float)(i % 13) / 13.0f;
    for (int64_t i = 0; i < n * 10; ++i) y[i] = (float)(i % 7) / 7.0f;
    accel_tensor_t *tx, *ty;
    int64_t sx[2] = {n, width}, sy[2] = {n, 10};
    CHECK(accel_tensor_create(x, (size_t)(n * width) * sizeof(float), ACCEL_DTYPE_FLOAT32, sx, 2, &tx));
    CHECK(accel_tensor_create(y, (size_t)(n * 10) * sizeof(float), ACCEL_DTYPE_FLOAT32, sy, 2, &ty));
    snprintf(json, sizeof json, "{\"batch_size\": %lld, \"shuffle\": true}", (long long)batch);
    CHECK(accel_dataloader_create_from_tensors(tx, ty, json, &s.dl));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    free(x);
    free(y);
    CHECK(accel_accelerator_prepare_model(s.acc, s.model));
    CHECK(accel_accelerator_prepare_optimizer(s.acc, s.opt));
    CHECK(accel_accelerator_prepare_dataloader(s.acc, s.dl));
    return s;
}

/* Seconds per step over `steps` steps. */
static double run_steps(Setup *s, int steps)
{
    double t0 = now();
    for (int i = 0; i < steps; ++i) {
        accel_batch_t *b = NULL;
        CHECK(accel_dataloader_next(s->dl, &b));
        if (b == NULL) CHECK(accel_dataloader_next(s->dl, &b)); /* a new pass */
        CHECK(accel_accelerator_train_step(s->acc, s->model, s->opt, NULL, b, "mse", NULL));
        accel_batch_free(b);
    }
    return (now() - t0) / steps;
}

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 7;
    const int steps = argc > 2 ? atoi(argv[2]) : 20;
    const int64_t width = argc > 3 ? atoll(argv[3]) : 256;
    const int64_t batch = argc > 4 ? atoll(argv[4]) : 32;
    char dir[] = "/tmp/accel_profile_bench_XXXXXX", plain[256], full[256];
    if (mkdtemp(dir) == NULL) return 1;
    snprintf(plain, sizeof plain, "{\"output_trace_dir\": \"%s/plain\"}", dir);
    snprintf(full, sizeof full,
             "{\"output_trace_dir\": \"%s/full\", \"record_shapes\": true, \"profile_memory\": true, \"with_flops\": true}",
             dir);
    Setup a = make_setup(plain, width, batch), b = make_setup(full, width, batch);
    run_steps(&a, 3);
    run_steps(&b, 3); /* warm up both */
    double *off = calloc((size_t)rounds, sizeof(double)), *on = calloc((size_t)rounds, sizeof(double)),
           *all = calloc((size_t)rounds, sizeof(double)), *wr = calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; ++r) {
        off[r] = run_steps(&a, steps);
        CHECK(accel_accelerator_profile_begin(a.acc));
        on[r] = run_steps(&a, steps);
        double t0 = now();
        CHECK(accel_accelerator_profile_end(a.acc));
        wr[r] = now() - t0;
        CHECK(accel_accelerator_profile_begin(b.acc));
        all[r] = run_steps(&b, steps);
        CHECK(accel_accelerator_profile_end(b.acc));
    }
    qsort(off, (size_t)rounds, sizeof(double), cmp);
    qsort(on, (size_t)rounds, sizeof(double), cmp);
    qsort(all, (size_t)rounds, sizeof(double), cmp);
    qsort(wr, (size_t)rounds, sizeof(double), cmp);
    const int m = rounds / 2;
    printf("mlp [%lld, %lld, %lld, 10], batch %lld, %d steps x %d rounds (medians)\n", (long long)width,
           (long long)width, (long long)width, (long long)batch, steps, rounds);
    printf("no profile:                         %.3f ms/step\n", off[m] * 1e3);
    printf("profile (defaults):                 %.3f ms/step  (x%.3f)\n", on[m] * 1e3, on[m] / off[m]);
    printf("profile (shapes, memory, flops):    %.3f ms/step  (x%.3f)\n", all[m] * 1e3, all[m] / off[m]);
    printf("profile_end writing %d steps' trace: %.1f ms\n", steps, wr[m] * 1e3);
    accel_dataloader_free(a.dl);
    accel_dataloader_free(b.dl);
    accel_optimizer_free(a.opt);
    accel_optimizer_free(b.opt);
    accel_model_free(a.model);
    accel_model_free(b.model);
    accel_accelerator_free(a.acc);
    accel_accelerator_free(b.acc);
    free(off);
    free(on);
    free(all);
    free(wr);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
