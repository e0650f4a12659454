/*
 * dist_damage save DIR CONFIG  |  dist_damage load LIST CONFIG
 *
 * The damage matrix's program (run_damage.py, issue 42.3). Every process prepares the same MLP, SGD with
 * momentum and a shuffled loader over a fixed data set.
 *   save: trains 3 optimizer steps and calls save_state(DIR).
 *   load: for each folder listed in LIST (one per line), calls load_state(folder) and prints
 *         "case I STATUS" and, when it loaded, what the loaded state gives: the evaluation loss over the whole
 *         data set, the loss of one training step (the loader's position, the RNG and the weights), and the
 *         evaluation loss after it (the optimizer's state). Values are printed as the bits of their float, so
 *         the driver compares them exactly. The next case loads over whatever the previous one left.
 */
#include "dist_common.h"

#include <string.h>

enum { N = 96, F = 8, C = 4 };

static float loss_of(accel_tensor_t *loss)
{
    float v = 0.0f;
    DIST_CHECK(accel_tensor_copy_to_buffer(loss, &v, sizeof v));
    accel_tensor_free(loss);
    return v;
}

static float eval_loss(accel_model_t *model, accel_tensor_t *x, accel_tensor_t *y)
{
    accel_tensor_t *out = NULL, *loss = NULL;
    DIST_CHECK(accel_model_forward_no_grad(model, x, &out));
    DIST_CHECK(accel_loss_compute("cross_entropy", out, y, &loss));
    accel_tensor_free(out);
    return loss_of(loss);
}

/* One optimizer step on the loader's next batch; returns its loss. */
static float train_step(accel_accelerator_t *acc, accel_model_t *model, accel_optimizer_t *opt, accel_dataloader_t *dl)
{
    for (;;) {
        accel_batch_t *b = NULL;
        DIST_CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) continue; /* next epoch */
        accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
        DIST_CHECK(accel_batch_get_inputs(b, &in));
        DIST_CHECK(accel_batch_get_labels(b, &lab));
        DIST_CHECK(accel_model_forward(model, in, &out));
        DIST_CHECK(accel_loss_compute("cross_entropy", out, lab, &loss));
        DIST_CHECK(accel_accelerator_backward(acc, loss));
        DIST_CHECK(accel_optimizer_step(opt));
        DIST_CHECK(accel_optimizer_zero_grad(opt));
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_tensor_free(out);
        accel_batch_free(b);
        return loss_of(loss);
    }
}

static unsigned bits(float v)
{
    unsigned u = 0;
    memcpy(&u, &v, sizeof u);
    return u;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "save") != 0 && strcmp(argv[1], "load") != 0)) {
        fprintf(stderr, "usage: dist_damage save DIR CONFIG | load LIST CONFIG\n");
        return 2;
    }
    static float x[N * F];
    static int64_t y[N];
    uint64_t s = 12345;
    for (int i = 0; i < N * F; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    for (int i = 0; i < N; ++i) y[i] = i % C;
    const int64_t xs[2] = {N, F}, ys[1] = {N};

    int32_t rank = 0;
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *features = NULL, *labels = NULL;
    DIST_CHECK(accel_process_get_index(&rank));
    DIST_CHECK(accel_random_set_seed(1000 + (uint64_t)rank, false, false));
    DIST_CHECK(accel_accelerator_create(argv[3], &acc));
    DIST_CHECK(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &features));
    DIST_CHECK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &labels));
    DIST_CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [8, 32, 32, 4], \"activation\": \"tanh\"}", &model));
    DIST_CHECK(accel_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}", &opt));
    DIST_CHECK(accel_dataloader_create_from_tensors(features, labels, "{\"batch_size\": 4, \"shuffle\": true, \"seed\": 7}", &dl));
    DIST_CHECK(accel_accelerator_prepare(acc, model, opt, dl, NULL));

    if (strcmp(argv[1], "save") == 0) {
        for (int k = 0; k < 3; ++k) (void)train_step(acc, model, opt, dl);
        DIST_CHECK(accel_accelerator_save_state(acc, argv[2]));
    } else {
        FILE *list = fopen(argv[2], "r");
        DIST_EXPECT(list != NULL, "cannot read %s", argv[2]);
        char line[4096];
        for (int i = 0; fgets(line, sizeof line, list) != NULL; ++i) {
            line[strcspn(line, "\n")] = '\0';
            const accel_status_t st = accel_accelerator_load_state(acc, line);
            if (st != ACCEL_OK) {
                /* The message on a line of its own: the driver checks the status; a person reads the message. */
                printf("case %d %s\nmessage %d %s\n", i, accel_status_name(st), i, accel_last_error_message());
            } else {
                const float before = eval_loss(model, features, labels);
                const float step = train_step(acc, model, opt, dl);
                const float after = eval_loss(model, features, labels);
                printf("case %d ACCEL_OK %08x %08x %08x\n", i, bits(before), bits(step), bits(after));
            }
            fflush(stdout);
        }
        fclose(list);
    }
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(features);
    accel_tensor_free(labels);
    accel_accelerator_free(acc);
    return 0;
}
