/* Gradient accumulation: the sync table of training-semantics.md §2, and the equivalence of accumulated
 * micro-batches with one large batch. */
#include "capi_helpers.h"

#define NSAMPLES 96
#define NIN 4
#define NOUT 2

static const char *kMlp = "{\"type\": \"mlp\", \"widths\": [4, 8, 2], \"activation\": \"tanh\"}";

static accel_dataloader_t *make_loader(int64_t n, const char *config)
{
    float x[NSAMPLES * NIN], y[NSAMPLES * NOUT];
    accel_tensor_t *tx, *ty;
    accel_dataloader_t *dl = NULL;
    int64_t i;
    for (i = 0; i < n * NIN; ++i) x[i] = (float)sin(0.37 * (double)i);
    for (i = 0; i < n * NOUT; ++i) y[i] = (float)cos(0.21 * (double)i);
    tx = matrix_f32(x, n, NIN);
    ty = matrix_f32(y, n, NOUT);
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, config, &dl));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    return dl;
}

/* Runs accumulate_begin/end around each of `count` micro-steps (one batch of `dl` each when dl is not NULL)
 * and records the step counter and sync flag seen inside. Returns the number of micro-steps done. */
static int record(accel_accelerator_t *acc, accel_model_t *m, accel_dataloader_t *dl, int count, int64_t *steps,
                  bool *syncs, bool *ends)
{
    int k;
    for (k = 0; k < count; ++k) {
        accel_batch_t *b = NULL;
        if (dl != NULL) {
            CHECK_OK(accel_dataloader_next(dl, &b));
            if (b == NULL) return k;
        }
        CHECK_OK(accel_accelerator_accumulate_begin(acc, m));
        steps[k] = -1;
        CHECK_OK(accel_accelerator_get_step(acc, &steps[k]));
        CHECK_OK(accel_accelerator_get_sync_gradients(acc, &syncs[k]));
        CHECK_OK(accel_accelerator_get_end_of_dataloader(acc, &ends[k]));
        CHECK_OK(accel_accelerator_accumulate_end(acc));
        accel_batch_free(b);
    }
    return k;
}

static void expect_table(const int64_t *steps, const bool *syncs, const int64_t *want_steps, const bool *want_syncs,
                         int n, const char *what)
{
    int k, bad = 0;
    for (k = 0; k < n; ++k) {
        CHECK(steps[k] == want_steps[k]);
        CHECK(syncs[k] == want_syncs[k]);
        if (steps[k] != want_steps[k] || syncs[k] != want_syncs[k]) bad = 1;
    }
    if (bad) {
        fprintf(stderr, "%s: got", what);
        for (k = 0; k < n; ++k) fprintf(stderr, " %ld%c", (long)steps[k], syncs[k] ? 'T' : 'F');
        fprintf(stderr, "\n");
    }
}

static void test_sync_table(void)
{
    static const int64_t want_steps[5] = {1, 2, 3, 4, 0};
    static const bool want_syncs[5] = {false, true, false, true, true};
    static const bool want_ends[5] = {false, false, false, false, true};
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_dataloader_t *dl;
    int64_t steps[8];
    bool syncs[8], ends[8], end = true;
    int epoch, k;

    CHECK_OK(accel_accelerator_create("{\"gradient_accumulation_steps\": 2}", &acc));
    CHECK_OK(accel_model_create_from_json(kMlp, &m));
    dl = make_loader(5, "{\"batch_size\": 1}");
    CHECK_OK(accel_accelerator_prepare(acc, m, NULL, dl, NULL));

    for (epoch = 0; epoch < 2; ++epoch) {
        accel_batch_t *b = (accel_batch_t *)&b;
        int64_t e = -1;
        CHECK(record(acc, m, dl, 5, steps, syncs, ends) == 5);
        expect_table(steps, syncs, want_steps, want_syncs, 5, "sync table");
        for (k = 0; k < 5; ++k) CHECK(ends[k] == want_ends[k]);
        /* End of the pass: OK and NULL; the loader no longer reports its end. */
        CHECK_OK(accel_dataloader_next(dl, &b));
        CHECK(b == NULL);
        CHECK_OK(accel_dataloader_get_epoch(dl, &e));
        CHECK(e == epoch + 1);
        CHECK_OK(accel_accelerator_get_end_of_dataloader(acc, &end));
        CHECK(!end);
    }
    accel_dataloader_free(dl);

    /* Outside any prepared loader there is no forced sync: the counter keeps going. */
    {
        static const int64_t ws[5] = {1, 2, 3, 4, 5};
        static const bool wy[5] = {false, true, false, true, false};
        CHECK(record(acc, m, NULL, 5, steps, syncs, ends) == 5);
        expect_table(steps, syncs, ws, wy, 5, "no loader");
        for (k = 0; k < 5; ++k) CHECK(!ends[k]);
    }
    /* Nor inside a loader that was not prepared. */
    {
        static const int64_t ws[5] = {6, 7, 8, 9, 10};
        static const bool wy[5] = {true, false, true, false, true};
        accel_dataloader_t *plain = make_loader(5, "{\"batch_size\": 1}");
        CHECK(record(acc, m, plain, 5, steps, syncs, ends) == 5);
        expect_table(steps, syncs, ws, wy, 5, "unprepared loader");
        accel_dataloader_free(plain);
    }
    accel_model_free(m);
    accel_accelerator_free(acc);

    /* sync_with_dataloader false: the last batch is an ordinary micro-step (step 5, no sync). */
    {
        static const int64_t ws[5] = {1, 2, 3, 4, 5};
        static const bool wy[5] = {false, true, false, true, false};
        static const int64_t ws2[5] = {6, 7, 8, 9, 10};
        static const bool wy2[5] = {true, false, true, false, true};
        acc = NULL;
        m = NULL;
        CHECK_OK(accel_accelerator_create(
            "{\"gradient_accumulation_plugin\": {\"num_steps\": 2, \"sync_with_dataloader\": false}}", &acc));
        CHECK_OK(accel_model_create_from_json(kMlp, &m));
        dl = make_loader(5, "{\"batch_size\": 1}");
        CHECK_OK(accel_accelerator_prepare(acc, m, NULL, dl, NULL));
        CHECK(record(acc, m, dl, 5, steps, syncs, ends) == 5);
        expect_table(steps, syncs, ws, wy, 5, "sync_with_dataloader false");
        CHECK(ends[4]); /* the loader still says it is at its end */
        CHECK(record(acc, m, dl, 6, steps, syncs, ends) == 0); /* the NULL batch ending the pass */
        CHECK(record(acc, m, dl, 5, steps, syncs, ends) == 5);
        expect_table(steps, syncs, ws2, wy2, 5, "sync_with_dataloader false, epoch 2");
        accel_dataloader_free(dl);
        accel_model_free(m);
        accel_accelerator_free(acc);
    }

    /* Uneven: 3 steps over 7 batches -> 1F 2F 3T 4F 5F 6T 0T. */
    {
        static const int64_t ws[7] = {1, 2, 3, 4, 5, 6, 0};
        static const bool wy[7] = {false, false, true, false, false, true, true};
        acc = NULL;
        m = NULL;
        CHECK_OK(accel_accelerator_create("{\"gradient_accumulation_steps\": 3}", &acc));
        CHECK_OK(accel_model_create_from_json(kMlp, &m));
        dl = make_loader(14, "{\"batch_size\": 2}");
        CHECK_OK(accel_accelerator_prepare(acc, m, NULL, dl, NULL));
        CHECK(record(acc, m, dl, 7, steps, syncs, ends) == 7);
        expect_table(steps, syncs, ws, wy, 7, "3 steps over 7 batches");
        accel_dataloader_free(dl);
        accel_model_free(m);
        accel_accelerator_free(acc);
    }
}

/* Trains a fresh MLP (seeded) over NSAMPLES samples with batch `batch_size` and `ga` accumulation steps using
 * train_step. Returns the model (caller frees) and the number of scheduler steps in *sched_steps. */
static accel_model_t *train(int64_t batch_size, int ga, int64_t *sched_steps, int check_non_sync)
{
    char acc_json[64], dl_json[64];
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL, *initial = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *s = NULL;
    accel_dataloader_t *dl;
    int micro = 0;

    snprintf(acc_json, sizeof acc_json, "{\"gradient_accumulation_steps\": %d}", ga);
    snprintf(dl_json, sizeof dl_json, "{\"batch_size\": %ld, \"shuffle\": false}", (long)batch_size);
    CHECK_OK(accel_accelerator_create(acc_json, &acc));
    CHECK_OK(accel_random_set_seed(2024, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &m));
    CHECK_OK(accel_random_set_seed(2024, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &initial));
    CHECK(max_param_diff(m, initial) == 0.0);
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"constant\"}", &s));
    dl = make_loader(NSAMPLES, dl_json);
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, s));

    for (;;) {
        accel_batch_t *b = NULL;
        double loss = -1.0;
        bool sync = false;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        CHECK_OK(accel_accelerator_train_step(acc, m, opt, s, b, "mse", &loss));
        CHECK(loss > 0.0);
        CHECK_OK(accel_accelerator_get_sync_gradients(acc, &sync));
        ++micro;
        CHECK(sync == (micro % ga == 0));
        if (check_non_sync && !sync) {
            /* Weights only move on sync steps: before the first one they are the initial weights. */
            if (micro < ga) CHECK(max_param_diff(m, initial) == 0.0);
        }
        if (check_non_sync && micro == ga) CHECK(max_param_diff(m, initial) > 0.0);
        accel_batch_free(b);
    }
    CHECK(micro == NSAMPLES / batch_size);
    CHECK_OK(accel_scheduler_get_step_count(s, sched_steps));

    accel_scheduler_free(s);
    accel_optimizer_free(opt);
    accel_dataloader_free(dl);
    accel_model_free(initial);
    accel_accelerator_free(acc);
    return m;
}

/* The same accumulated training spelled out with the individual calls, as a C user's loop would be. */
static accel_model_t *train_manual(int64_t batch_size, int ga)
{
    char acc_json[64], dl_json[64];
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL, *before = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl;
    int micro = 0;

    snprintf(acc_json, sizeof acc_json, "{\"gradient_accumulation_steps\": %d}", ga);
    snprintf(dl_json, sizeof dl_json, "{\"batch_size\": %ld}", (long)batch_size);
    CHECK_OK(accel_accelerator_create(acc_json, &acc));
    CHECK_OK(accel_random_set_seed(2024, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &m));
    CHECK_OK(accel_random_set_seed(2024, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &before));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    dl = make_loader(NSAMPLES, dl_json);
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));

    for (;;) {
        accel_batch_t *b = NULL;
        accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL, *g = NULL;
        bool sync = true;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        ++micro;
        CHECK_OK(accel_accelerator_accumulate_begin(acc, m));
        CHECK_OK(accel_batch_get_inputs(b, &in));
        CHECK_OK(accel_batch_get_labels(b, &lab));
        CHECK_OK(accel_model_forward(m, in, &out));
        CHECK_OK(accel_loss_compute("mse", out, lab, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_accelerator_get_sync_gradients(acc, &sync));
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        if (!sync) {
            /* A non-sync step: neither step nor zero_grad acted. */
            CHECK(max_param_diff(m, before) == 0.0);
            CHECK_OK(accel_model_get_gradient(m, "0.weight", &g));
            CHECK(g != NULL);
            accel_tensor_free(g);
        } else {
            /* A sync step: the weights moved and the gradients are gone. */
            CHECK(max_param_diff(m, before) > 0.0);
            g = (accel_tensor_t *)&g;
            CHECK_OK(accel_model_get_gradient(m, "0.weight", &g));
            CHECK(g == NULL);
            /* Remember the new weights. */
            {
                size_t n = 0, i;
                CHECK_OK(accel_model_get_state_dict_size(m, &n));
                for (i = 0; i < n; ++i) {
                    const char *key = NULL;
                    accel_tensor_t *t = NULL;
                    CHECK_OK(accel_model_get_state_dict_key(m, i, &key));
                    CHECK_OK(accel_model_get_tensor(m, key, &t));
                    CHECK_OK(accel_model_load_state_dict(before, &key, (const accel_tensor_t *const *)&t, 1, false));
                    accel_tensor_free(t);
                }
            }
        }
        CHECK_OK(accel_accelerator_accumulate_end(acc));
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_tensor_free(out);
        accel_tensor_free(loss);
        accel_batch_free(b);
    }
    CHECK(micro == NSAMPLES / batch_size);
    accel_optimizer_free(opt);
    accel_dataloader_free(dl);
    accel_model_free(before);
    accel_accelerator_free(acc);
    return m;
}

static void test_equivalence(void)
{
    int64_t steps_acc = -1, steps_big = -1;
    accel_model_t *accumulated = train(8, 4, &steps_acc, 1);
    accel_model_t *big = train(32, 1, &steps_big, 0);
    accel_model_t *manual = train_manual(8, 4);
    accel_model_t *untrained = NULL;
    double diff;

    /* 96 samples: 3 optimizer (and scheduler) steps either way. */
    CHECK(steps_acc == 3);
    CHECK(steps_big == 3);
    diff = max_param_diff(accumulated, big);
    CHECK(diff <= 1e-5);
    if (!(diff <= 1e-5)) fprintf(stderr, "accumulated vs large batch: max |diff| = %g\n", diff);
    diff = max_param_diff(accumulated, manual);
    CHECK(diff <= 1e-6);
    if (!(diff <= 1e-6)) fprintf(stderr, "train_step vs manual loop: max |diff| = %g\n", diff);
    /* And training did something. */
    CHECK_OK(accel_random_set_seed(2024, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &untrained));
    CHECK(max_param_diff(accumulated, untrained) > 1e-3);

    /* The comparison can fail: accumulating 2 micro-batches of 8 (6 steps of 16) gives different weights. */
    {
        int64_t steps_other = -1;
        accel_model_t *other = train(8, 2, &steps_other, 0);
        CHECK(steps_other == 6);
        CHECK(max_param_diff(other, big) > 1e-4);
        accel_model_free(other);
    }

    accel_model_free(untrained);
    accel_model_free(accumulated);
    accel_model_free(big);
    accel_model_free(manual);
}

int main(void)
{
    test_sync_table();
    test_equivalence();
    return capi_report("test_accumulation");
}
