/* Harness of README's and the quick tour's C loop (tests/docs/run_snippets.py puts the block in place of the
 * snippet line below): it declares what the block uses, gives it a learnable data set, and checks that a pass
 * of the block's loop trained (the last loss below the first, every call of the block having succeeded). */
#include <accel/accel.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N 2048
#define F 16
#define C 4

static accel_status_t last = ACCEL_OK;
static int calls_failed = 0;
/* The block ignores statuses, as a slide would; count failures instead of letting them pass unseen. */
static accel_status_t note(accel_status_t s)
{
    if (s != ACCEL_OK) {
        calls_failed++;
        last = s;
        fprintf(stderr, "%s: %s\n", accel_status_name(s), accel_last_error_message());
    }
    return s;
}
#define accel_accelerator_create(...) note(accel_accelerator_create(__VA_ARGS__))
#define accel_model_create_from_json(...) note(accel_model_create_from_json(__VA_ARGS__))
#define accel_optimizer_create(...) note(accel_optimizer_create(__VA_ARGS__))
#define accel_dataloader_create_from_tensors(...) note(accel_dataloader_create_from_tensors(__VA_ARGS__))
#define accel_accelerator_prepare(...) note(accel_accelerator_prepare(__VA_ARGS__))
#define accel_accelerator_train_step(...) note(train_step_logged(__VA_ARGS__))

static double first_loss = NAN;
static int steps = 0;
static accel_status_t train_step_logged(accel_accelerator_t *a, accel_model_t *m, accel_optimizer_t *o,
                                        accel_scheduler_t *s, const accel_batch_t *b, const char *name, double *loss)
{
    accel_status_t st = (accel_accelerator_train_step)(a, m, o, s, b, name, loss);
    if (st == ACCEL_OK && steps++ == 0) first_loss = *loss;
    return st;
}

int main(void)
{
    static float xs[N * F];
    static int64_t ys[N];
    uint64_t r = 42;
    for (int i = 0; i < N; i++) {   /* class = which of the first C features is largest */
        int best = 0;
        for (int f = 0; f < F; f++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            xs[i * F + f] = (float)((r >> 40) / (double)(1 << 24)) - 0.5f;
            if (f < C && xs[i * F + f] > xs[i * F + best]) best = f;
        }
        ys[i] = best;
    }
    int64_t xshape[2] = {N, F}, yshape[1] = {N};
    accel_tensor_t *x = NULL, *y = NULL;
    if (accel_random_set_seed(42, false, false) != ACCEL_OK ||
        accel_tensor_create(xs, sizeof xs, ACCEL_DTYPE_FLOAT32, xshape, 2, &x) != ACCEL_OK ||
        accel_tensor_create(ys, sizeof ys, ACCEL_DTYPE_INT64, yshape, 1, &y) != ACCEL_OK) {
        fprintf(stderr, "setup: %s\n", accel_last_error_message());
        return 1;
    }
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    double loss = NAN;

@SNIPPET@

    printf("steps %d, first loss %.4f, last loss %.4f, failed calls %d\n", steps, first_loss, loss, calls_failed);
    int ok = calls_failed == 0 && steps == N / 64 && loss < first_loss;
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    accel_tensor_free(x);
    accel_tensor_free(y);
    return ok ? 0 : 1;
}
