/* A program outside the accel tree, built against an installed package (the tarball, the Debian packages): it
 * trains an MLP two optimizer steps through the C API and prints the file libaccel was loaded from, so the test
 * can check that it is the installed copy and not the build tree's. */
#define _GNU_SOURCE
#include <accel/accel.h>

#include <dlfcn.h>
#include <stdio.h>

enum { N = 128, F = 8, C = 2 };

static int failed(accel_status_t st, const char *what)
{
    if (st == ACCEL_OK)
        return 0;
    fprintf(stderr, "train_two_steps: %s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
    return 1;
}

int main(void)
{
    static float xs[N * F];
    static int64_t ys[N];
    for (int i = 0; i < N; i++) {   /* class = sign of the first feature */
        for (int f = 0; f < F; f++)
            xs[i * F + f] = (float)(((i * 7 + f * 13) % 17) - 8) / 8.0f;
        ys[i] = xs[i * F] > 0.0f;
    }
    int64_t xshape[2] = {N, F}, yshape[1] = {N};
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *x = NULL, *y = NULL;
    accel_dataloader_t *dl = NULL;
    double loss[2] = {0, 0};
    int steps = 0;
    int bad = failed(accel_accelerator_create("{}", &acc), "accelerator") ||
              failed(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [8, 16, 2]}", &model), "model") ||
              failed(accel_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt), "optimizer") ||
              failed(accel_tensor_create(xs, sizeof xs, ACCEL_DTYPE_FLOAT32, xshape, 2, &x), "x") ||
              failed(accel_tensor_create(ys, sizeof ys, ACCEL_DTYPE_INT64, yshape, 1, &y), "y") ||
              failed(accel_dataloader_create_from_tensors(x, y, "{\"batch_size\": 64}", &dl), "loader") ||
              failed(accel_accelerator_prepare(acc, model, opt, dl, NULL), "prepare");
    for (accel_batch_t *b = NULL; !bad && steps < 2; accel_batch_free(b), b = NULL) {
        bad = failed(accel_dataloader_next(dl, &b), "next") || b == NULL ||
              failed(accel_accelerator_train_step(acc, model, opt, NULL, b, "cross_entropy", &loss[steps]),
                     "train_step");
        steps += !bad;
    }
    Dl_info where;
    if (!dladdr((void *)accel_version_string, &where) || !where.dli_fname)
        where.dli_fname = "(unknown)";
    printf("accel %s from %s: 2 steps, loss %.4f -> %.4f\n", accel_version_string(), where.dli_fname, loss[0],
           loss[1]);
    accel_dataloader_free(dl);
    accel_tensor_free(x);
    accel_tensor_free(y);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return bad || steps != 2;
}
