/*
 * dist_profile CONFIG_JSON STEPS CHECKPOINT_DIR
 *
 * accelerator.profile() around a training loop of STEPS steps (data_wait, forward, loss, backward, optimizer
 * step) and one save_state into CHECKPOINT_DIR, under CONFIG_JSON (its kwargs_handlers.profile says where the
 * trace goes). One process or several under `accel launch`; run_profile.py checks the traces.
 * Prints "profile: ok" per process.
 */
#include "dist_common.h"

#include <string.h>

static accel_tensor_t *matrix(const float *data, int64_t rows, int64_t cols)
{
    accel_tensor_t *t = NULL;
    int64_t shape[2] = {rows, cols};
    DIST_CHECK(accel_tensor_create(data, (size_t)(rows * cols) * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 2, &t));
    return t;
}

/* 64 samples of 8 features, 2 labels; batches of 4 per process. */
static accel_dataloader_t *make_loader(void)
{
    float x[64 * 8], y[64 * 2];
    for (int i = 0; i < 64 * 8; ++i) x[i] = (float)((i * 37) % 17) / 17.0f;
    for (int i = 0; i < 64 * 2; ++i) y[i] = (float)(i % 5) / 5.0f;
    accel_tensor_t *tx = matrix(x, 64, 8), *ty = matrix(y, 64, 2);
    accel_dataloader_t *dl = NULL;
    DIST_CHECK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 4}", &dl));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    return dl;
}

static void train_step(accel_accelerator_t *acc, accel_model_t *m, accel_optimizer_t *opt, accel_dataloader_t *dl)
{
    accel_batch_t *batch = NULL;
    DIST_CHECK(accel_dataloader_next(dl, &batch));
    DIST_EXPECT(batch != NULL, "the loader ran out of batches");
    accel_tensor_t *inputs = NULL, *labels = NULL;
    DIST_CHECK(accel_batch_get_inputs(batch, &inputs));
    DIST_CHECK(accel_batch_get_labels(batch, &labels));
    accel_tensor_t *out = NULL, *loss = NULL;
    DIST_CHECK(accel_model_forward(m, inputs, &out));
    DIST_CHECK(accel_loss_compute("mse", out, labels, &loss));
    DIST_CHECK(accel_accelerator_backward(acc, loss));
    DIST_CHECK(accel_optimizer_step(opt));
    DIST_CHECK(accel_optimizer_zero_grad(opt));
    accel_tensor_free(loss);
    accel_tensor_free(out);
    accel_tensor_free(labels);
    accel_tensor_free(inputs);
    accel_batch_free(batch);
}

int main(int argc, char **argv)
{
    DIST_EXPECT(argc == 4, "usage: dist_profile CONFIG_JSON STEPS CHECKPOINT_DIR");
    const int steps = atoi(argv[2]);
    accel_accelerator_t *acc = NULL;
    DIST_CHECK(accel_accelerator_create(argv[1], &acc));
    accel_model_t *m = NULL;
    DIST_CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [8, 16, 2]}", &m));
    accel_optimizer_t *opt = NULL;
    DIST_CHECK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    accel_dataloader_t *dl = make_loader();
    DIST_CHECK(accel_accelerator_prepare_model(acc, m));
    DIST_CHECK(accel_accelerator_prepare_optimizer(acc, opt));
    DIST_CHECK(accel_accelerator_prepare_dataloader(acc, dl));

    DIST_CHECK(accel_accelerator_profile_begin(acc));
    /* A second begin inside the profile is refused; the profile goes on. */
    DIST_EXPECT(accel_accelerator_profile_begin(acc) == ACCEL_ERR_FAILED_PRECONDITION, "a nested profile_begin: %s",
                accel_last_error_message());
    for (int s = 0; s < steps; ++s) train_step(acc, m, opt, dl);
    DIST_CHECK(accel_accelerator_save_state(acc, argv[3]));
    DIST_CHECK(accel_accelerator_profile_end(acc));
    DIST_EXPECT(accel_accelerator_profile_end(acc) == ACCEL_ERR_FAILED_PRECONDITION, "profile_end without a profile");

    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    printf("profile: ok\n");
    return 0;
}
