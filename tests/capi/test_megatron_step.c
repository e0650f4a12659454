/* MegatronLMPlugin's gradient_clipping (issue 36): Megatron's train step clips the gradients by their global norm
 * before each optimizer step (1.0 unless told 0), and so does accel's optimizer step under megatron_lm_plugin,
 * both inside accel_accelerator_train_step and in accel_optimizer_step after accel_accelerator_backward.
 *  - By hand: w = (1, 1), x = (3, 4), y = 0, mse: gradient (42, 56) of norm 70, SGD lr 0.1. Clipped at 1.0 the
 *    step moves w by 0.1 x (0.6, 0.8); at 0.5 by half that; 0 is no clipping (w - 0.1 x (42, 56)). Accumulating
 *    2 batches, only the sync step clips (the summed gradient). The user's accel_accelerator_clip_grad_norm then
 *    only measures (as under DeepSpeed): the step clips once. The sharding engine's step (use_distributed_optimizer,
 *    fsdp_plugin) clips the same.
 *  - An mlp trained 8 steps under the plugin (train_step, and backward + optimizer step) equals, bit for bit, the
 *    same training without it calling accel_accelerator_clip_grad_norm(1.0) before each step, and differs from
 *    the training without clipping. The pipeline and tensor parallelism: tests/distributed/run_pp.py --clip.
 *  - num_micro_batches at pp_degree 1: each batch split and accumulated as Megatron's no-pipelining schedule does,
 *    equal to the whole batch's training (mean losses), refused by name where the rows do not split. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "capi_helpers.h"
#include "capi_test.h"

enum { NSAMPLES = 64, NIN = 4, NOUT = 3 };

static const char *kMlp = "{\"type\": \"mlp\", \"widths\": [4, 16, 3]}";

/* The one-layer model w = (1, 1) and its batch x = (3, 4), y = 0, prepared by an accelerator of `config`. */
struct hand {
    accel_accelerator_t *acc;
    accel_model_t *m;
    accel_optimizer_t *opt;
    accel_dataloader_t *dl;
    accel_batch_t *batch;
};

static struct hand hand_make(const char *config)
{
    struct hand h = {NULL, NULL, NULL, NULL, NULL};
    float w[2] = {1.0f, 1.0f}, x[2] = {3.0f, 4.0f}, zero[1] = {0.0f};
    int64_t s12[2] = {1, 2};
    accel_tensor_t *tw = tensor_f32(w, s12, 2), *tx = matrix_f32(x, 1, 2), *ty = matrix_f32(zero, 1, 1);
    const char *key = "0.weight";
    CHECK_OK(accel_accelerator_create(config, &h.acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", "
                                          "\"in_features\": 2, \"out_features\": 1, \"bias\": false}]}",
                                          &h.m));
    CHECK_OK(accel_model_load_state_dict(h.m, &key, (const accel_tensor_t *const *)&tw, 1, true));
    CHECK_OK(accel_optimizer_create(h.m, "{\"type\": \"sgd\", \"lr\": 0.1}", &h.opt));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 1}", &h.dl));
    CHECK_OK(accel_accelerator_prepare(h.acc, h.m, h.opt, h.dl, NULL));
    CHECK_OK(accel_dataloader_next(h.dl, &h.batch));
    accel_tensor_free(tw);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    return h;
}

static void hand_free(struct hand *h)
{
    accel_batch_free(h->batch);
    accel_dataloader_free(h->dl);
    accel_optimizer_free(h->opt);
    accel_model_free(h->m);
    accel_accelerator_free(h->acc);
}

/* The weight after train_steps (`steps` of the same batch) under `config`, against (w0, w1). */
static void expect_weight_after(const char *config, int steps, double w0, double w1)
{
    struct hand h = hand_make(config);
    float got[2] = {NAN, NAN};
    size_t n = 0;
    float *w;
    int s;
    for (s = 0; s < steps; ++s) {
        double loss = 0.0;
        CHECK_OK(accel_accelerator_train_step(h.acc, h.m, h.opt, NULL, h.batch, "mse", &loss));
        CHECK_NEAR(loss, 49.0, 1e-5);
    }
    w = model_tensor_f32(h.m, "0.weight", &n);
    if (w != NULL && n == 2) memcpy(got, w, sizeof got);
    free(w);
    CHECK_NEAR(got[0], w0, 1e-6);
    CHECK_NEAR(got[1], w1, 1e-6);
    if (!(fabs(got[0] - w0) <= 1e-6 && fabs(got[1] - w1) <= 1e-6))
        fprintf(stderr, "%s, %d step(s): w = (%.9g, %.9g), expected (%.9g, %.9g)\n", config, steps, got[0], got[1], w0, w1);
    hand_free(&h);
}

static void test_by_hand(void)
{
    /* MegatronLMPlugin's default gradient_clipping is 1.0: the gradient (42, 56) becomes (0.6, 0.8). */
    expect_weight_after("{\"megatron_lm_plugin\": {}}", 1, 0.94, 0.92);
    expect_weight_after("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0.5}}", 1, 0.97, 0.96);
    expect_weight_after("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}}", 1, -3.2, -4.6); /* 0: none */
    expect_weight_after("{}", 1, -3.2, -4.6);
    /* The sharding engine's step clips alike: Megatron's distributed optimizer (ZeRO-1), and fsdp_plugin. */
    expect_weight_after("{\"cpu\": true, \"megatron_lm_plugin\": {\"use_distributed_optimizer\": true}}", 1, 0.94, 0.92);
    expect_weight_after("{\"cpu\": true, \"megatron_lm_plugin\": {}, \"fsdp_plugin\": {\"sharding_strategy\": \"NO_SHARD\"}}", 1,
                        0.94, 0.92);
    /* A norm below the threshold is left alone. */
    expect_weight_after("{\"megatron_lm_plugin\": {\"gradient_clipping\": 100}}", 1, -3.2, -4.6);
    /* Accumulating 2 batches (the one-batch loader's end not syncing): nothing moves on the first; the sync step clips
       the sum (21, 28) + (21, 28). */
    expect_weight_after("{\"gradient_accumulation_plugin\": {\"num_steps\": 2, \"sync_with_dataloader\": false}, "
                        "\"megatron_lm_plugin\": {}}",
                        1, 1.0, 1.0);
    expect_weight_after("{\"gradient_accumulation_plugin\": {\"num_steps\": 2, \"sync_with_dataloader\": false}, "
                        "\"megatron_lm_plugin\": {}}",
                        2, 0.94, 0.92);
    /* The launcher's variables (accel launch --use_megatron_lm, its default --megatron_lm_gradient_clipping 1.0). */
    setenv("ACCELERATE_USE_MEGATRON_LM", "true", 1);
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "1.0", 1);
    expect_weight_after("{}", 1, 0.94, 0.92);
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "0.0", 1);
    expect_weight_after("{}", 1, -3.2, -4.6);
    unsetenv("MEGATRON_LM_GRADIENT_CLIPPING");
    unsetenv("ACCELERATE_USE_MEGATRON_LM");

    /* backward, then the user's clip_grad_norm: it measures (70) and leaves the gradient to the step, which clips
       it once. */
    {
        struct hand h = hand_make("{\"megatron_lm_plugin\": {}}");
        accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL, *g = NULL;
        float grad[2] = {NAN, NAN}, after[2] = {NAN, NAN};
        double norm = 0.0;
        size_t n = 0;
        float *w;
        CHECK_OK(accel_batch_get_inputs(h.batch, &in));
        CHECK_OK(accel_batch_get_labels(h.batch, &lab));
        CHECK_OK(accel_model_forward(h.m, in, &out));
        CHECK_OK(accel_loss_compute("mse", out, lab, &loss));
        CHECK_OK(accel_accelerator_backward(h.acc, loss));
        CHECK_OK(accel_accelerator_clip_grad_norm(h.acc, h.m, 1.0, 2.0, &norm));
        CHECK_NEAR(norm, 70.0, 1e-4);
        CHECK_OK(accel_model_get_gradient(h.m, "0.weight", &g));
        if (g != NULL && read_f32(g, grad, 2) == 0) {
            CHECK_NEAR(grad[0], 42.0, 1e-4);
            CHECK_NEAR(grad[1], 56.0, 1e-4);
        }
        CHECK_OK(accel_optimizer_step(h.opt));
        w = model_tensor_f32(h.m, "0.weight", &n);
        if (w != NULL && n == 2) memcpy(after, w, sizeof after);
        free(w);
        CHECK_NEAR(after[0], 0.94, 1e-6);
        CHECK_NEAR(after[1], 0.92, 1e-6);
        accel_tensor_free(g);
        accel_tensor_free(loss);
        accel_tensor_free(out);
        accel_tensor_free(lab);
        accel_tensor_free(in);
        hand_free(&h);
    }
    /* What cannot be: a negative clipping, and two clippings that disagree. */
    {
        accel_accelerator_t *acc = NULL;
        CHECK_FAILS(accel_accelerator_create("{\"megatron_lm_plugin\": {\"gradient_clipping\": -1}}", &acc),
                    ACCEL_ERR_INVALID_ARGUMENT, "megatron_lm_plugin.gradient_clipping");
        CHECK_FAILS(accel_accelerator_create("{\"megatron_lm_plugin\": {\"gradient_clipping\": 1.0}, "
                                             "\"deepspeed_plugin\": {\"zero_stage\": 1, \"gradient_clipping\": 0.5}}",
                                             &acc),
                    ACCEL_ERR_INVALID_ARGUMENT, "megatron_lm_plugin.gradient_clipping (1.000000) with deepspeed_plugin");
        CHECK(acc == NULL);
    }
}

/* An mlp trained 8 steps of batch 8 under `config`: by train_step (mode 0), by backward + optimizer step (1), or
 * by backward + accel_accelerator_clip_grad_norm(1.0) + optimizer step (2). train_step's losses into `losses`
 * (8 of them) when not NULL. */
static accel_model_t *train_losses(const char *config, int mode, double *losses)
{
    float x[NSAMPLES * NIN], y[NSAMPLES * NOUT];
    accel_tensor_t *tx, *ty;
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    int64_t i;
    for (i = 0; i < NSAMPLES * NIN; ++i) x[i] = (float)sin(0.37 * (double)i);
    for (i = 0; i < NSAMPLES * NOUT; ++i) y[i] = 30.0f * (float)cos(0.21 * (double)i); /* norms above 1 */
    tx = matrix_f32(x, NSAMPLES, NIN);
    ty = matrix_f32(y, NSAMPLES, NOUT);
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_random_set_seed(2024, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 8}", &dl));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));
    for (;;) {
        accel_batch_t *b = NULL;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        if (mode == 0) {
            double loss = 0.0;
            CHECK_OK(accel_accelerator_train_step(acc, m, opt, NULL, b, "mse", &loss));
            if (losses != NULL) *losses++ = loss;
        } else {
            accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
            CHECK_OK(accel_batch_get_inputs(b, &in));
            CHECK_OK(accel_batch_get_labels(b, &lab));
            CHECK_OK(accel_model_forward(m, in, &out));
            CHECK_OK(accel_loss_compute("mse", out, lab, &loss));
            CHECK_OK(accel_accelerator_backward(acc, loss));
            if (mode == 2) {
                double norm = 0.0;
                CHECK_OK(accel_accelerator_clip_grad_norm(acc, m, 1.0, 2.0, &norm));
                CHECK(norm > 1.0); /* every step clips: the comparison below can fail */
            }
            CHECK_OK(accel_optimizer_step(opt));
            CHECK_OK(accel_optimizer_zero_grad(opt));
            accel_tensor_free(loss);
            accel_tensor_free(out);
            accel_tensor_free(lab);
            accel_tensor_free(in);
        }
        accel_batch_free(b);
    }
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_accelerator_free(acc);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    return m;
}

static accel_model_t *train(const char *config, int mode) { return train_losses(config, mode, NULL); }

static void test_equals_clip_grad_norm_before_each_step(void)
{
    accel_model_t *want = train("{}", 2), *none = train("{}", 1);
    accel_model_t *stepped = train("{\"megatron_lm_plugin\": {\"gradient_clipping\": 1.0}}", 0);
    accel_model_t *manual = train("{\"megatron_lm_plugin\": {\"gradient_clipping\": 1.0}}", 1);
    accel_model_t *off = train("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}}", 0);
    double d;
    CHECK((d = max_param_diff(stepped, want)) == 0.0);
    if (d != 0.0) fprintf(stderr, "train_step under the plugin vs clip_grad_norm(1.0): max |diff| = %g\n", d);
    CHECK((d = max_param_diff(manual, want)) == 0.0);
    if (d != 0.0) fprintf(stderr, "optimizer step under the plugin vs clip_grad_norm(1.0): max |diff| = %g\n", d);
    CHECK((d = max_param_diff(off, none)) == 0.0);
    if (d != 0.0) fprintf(stderr, "gradient_clipping 0 vs no clipping: max |diff| = %g\n", d);
    CHECK(max_param_diff(want, none) > 1e-3); /* clipping changed the training */
    accel_model_free(off);
    accel_model_free(manual);
    accel_model_free(stepped);
    accel_model_free(none);
    accel_model_free(want);
}

/* num_micro_batches at pp_degree 1: Megatron's forward_backward_no_pipelining splits each batch and accumulates the
 * micro-batches' gradients, each loss divided by their count; the loss reported is their mean. With a mean loss over
 * equal micro-batches that is the whole batch's training (within rounding), with and without clipping. */
static void test_micro_batches_without_a_pipeline(void)
{
    double whole[8], split[8];
    accel_model_t *want = train_losses("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}}", 0, whole);
    accel_model_t *got = train_losses("{\"megatron_lm_plugin\": {\"num_micro_batches\": 4, \"gradient_clipping\": 0}}", 0, split);
    accel_model_t *clipped = train("{\"megatron_lm_plugin\": {\"num_micro_batches\": 2}}", 0);
    accel_model_t *want_clipped = train("{}", 2);
    double d;
    int s;
    CHECK((d = max_param_diff(got, want)) <= 1e-6);
    if (!(d <= 1e-6)) fprintf(stderr, "4 micro-batches vs the whole batch: max |diff| = %g\n", d);
    for (s = 0; s < 8; ++s) CHECK_NEAR(split[s], whole[s], 1e-6 * whole[s]);
    CHECK((d = max_param_diff(clipped, want_clipped)) <= 1e-6);
    if (!(d <= 1e-6)) fprintf(stderr, "2 micro-batches, clipped vs clip_grad_norm(1.0): max |diff| = %g\n", d);
    /* 8 rows do not split into 3 equal micro-batches: refused by name, and no accumulate() left open. */
    {
        struct hand h = hand_make("{\"megatron_lm_plugin\": {\"num_micro_batches\": 3}}");
        double loss = 0.0;
        CHECK_FAILS(accel_accelerator_train_step(h.acc, h.m, h.opt, NULL, h.batch, "mse", &loss),
                    ACCEL_ERR_INVALID_ARGUMENT, "1 rows do not split into num_micro_batches (3");
        CHECK_FAILS(accel_accelerator_accumulate_end(h.acc), ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end");
        hand_free(&h);
    }
    accel_model_free(want_clipped);
    accel_model_free(clipped);
    accel_model_free(got);
    accel_model_free(want);
}

int main(void)
{
    unsetenv("ACCELERATE_USE_MEGATRON_LM");
    test_by_hand();
    test_equals_clip_grad_norm_before_each_step();
    test_micro_batches_without_a_pipeline();
    return capi_report("test_megatron_step");
}
