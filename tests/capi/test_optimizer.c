/* accel/optimizer.h: every optimizer type steps as PyTorch's does, learning rates, parameter groups, bad
 * configs. With the argument "reference" (needs Python's torch): parameter groups, a scheduler and the saved
 * optimizer state against Python's torch.optim.AdamW (param_groups_reference.py). */
#include "capi_helpers.h"

#define NW 12 /* elements of "0.weight" in the [3, 4, 2] MLP */

/* One backward on a fixed batch and one optimizer step with `config`: weights and gradient of "0.weight"
 * before, weights after. Returns 0 on success. */
static int one_step(const char *config, float *before, float *grad, float *after)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *in, *target, *out = NULL, *loss = NULL, *g = NULL, *w = NULL;
    float x[2 * 3] = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
    float y[2 * 2] = {1.0f, -1.0f, 0.0f, 2.0f};
    int rc = 1;

    CHECK_OK(accel_random_set_seed(1234, false, false));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [3, 4, 2]}", &m));
    CHECK_OK(accel_optimizer_create(m, config, &opt));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    if (m == NULL || opt == NULL || acc == NULL) goto done;
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    in = matrix_f32(x, 2, 3);
    target = matrix_f32(y, 2, 2);
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK_OK(accel_loss_compute("mse", out, target, &loss));
    CHECK_OK(accel_accelerator_backward(acc, loss));
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &w));
    CHECK_OK(accel_model_get_gradient(m, "0.weight", &g));
    if (w != NULL && g != NULL && read_f32(w, before, NW) == 0 && read_f32(g, grad, NW) == 0) {
        accel_tensor_free(w);
        w = NULL;
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_model_get_tensor(m, "0.weight", &w));
        if (w != NULL && read_f32(w, after, NW) == 0) rc = 0;
    }
    {
        bool skipped = true;
        CHECK_OK(accel_optimizer_get_step_was_skipped(opt, &skipped));
        CHECK(!skipped);
    }
    accel_tensor_free(in);
    accel_tensor_free(target);
    accel_tensor_free(out);
    accel_tensor_free(loss);
    accel_tensor_free(g);
    accel_tensor_free(w);
done:
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    return rc;
}

static int changed(const float *a, const float *b)
{
    int i;
    for (i = 0; i < NW; ++i)
        if (a[i] != b[i]) return 1;
    return 0;
}

/* after[i] ~ expect(before[i], grad[i]) for every element whose gradient is not tiny. */
typedef double (*rule_fn)(double w, double g);
static void check_rule(const char *config, rule_fn rule, double tol)
{
    float before[NW], grad[NW], after[NW];
    int i, bad = 0, used = 0;
    if (one_step(config, before, grad, after) != 0) {
        CHECK(!"one_step failed");
        return;
    }
    CHECK(changed(before, after));
    for (i = 0; i < NW; ++i) {
        double expect;
        if (fabs(grad[i]) < 1e-4) continue;
        ++used;
        expect = rule(before[i], grad[i]);
        if (fabs(expect - after[i]) > tol) {
            if (!bad)
                fprintf(stderr, "%s: element %d: w %g g %g -> %g, expected %g\n", config, i, before[i], grad[i],
                        after[i], expect);
            bad = 1;
        }
    }
    CHECK(used > 0);
    CHECK(!bad);
}

/* param_groups: "0.weight" in a group of its own (lr 0.05, weight decay 0.5), or in the rest (lr 0.1, none). */
static double rule_group_own(double w, double g) { return w - 0.05 * (g + 0.5 * w); }

static double sgn(double g) { return g > 0 ? 1.0 : g < 0 ? -1.0 : 0.0; }
static double rule_sgd(double w, double g) { return w - 0.1 * g; }
static double rule_sgd_wd(double w, double g) { return w - 0.1 * (g + 0.5 * w); }
/* First step with momentum: the buffer is the gradient itself. */
static double rule_sgd_momentum(double w, double g) { return w - 0.1 * g; }
/* Nesterov: g + momentum * buf, buf = g on the first step. */
static double rule_sgd_nesterov(double w, double g) { return w - 0.1 * (g + 0.9 * g); }
/* Adam, first step: m_hat = g, v_hat = g^2, so the update is lr * g / (|g| + eps). */
static double rule_adam(double w, double g) { return w - 0.01 * g / (fabs(g) + 1e-8); }
/* AdamW: decoupled decay first, then the Adam update. */
static double rule_adamw(double w, double g) { return w * (1.0 - 0.01 * 0.1) - 0.01 * sgn(g); }
/* Adagrad, first step: sum = g^2; update lr * g / (sqrt(sum) + eps). */
static double rule_adagrad(double w, double g) { return w - 0.05 * g / (fabs(g) + 1e-10); }
/* RMSprop, first step: v = (1 - alpha) g^2 = 0.01 g^2; update lr * g / (sqrt(v) + eps) = 10 lr sign(g). */
static double rule_rmsprop(double w, double g) { return w - 0.001 * g / (sqrt(0.01 * g * g) + 1e-8); }

static void test_each_type_steps(void)
{
    check_rule("{\"type\": \"sgd\", \"lr\": 0.1}", rule_sgd, 1e-6);
    check_rule("{\"type\": \"sgd\", \"lr\": 0.1, \"weight_decay\": 0.5}", rule_sgd_wd, 1e-6);
    check_rule("{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}", rule_sgd_momentum, 1e-6);
    check_rule("{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9, \"nesterov\": true, \"dampening\": 0}",
               rule_sgd_nesterov, 1e-6);
    check_rule("{\"type\": \"adam\", \"lr\": 0.01}", rule_adam, 1e-5);
    check_rule("{\"type\": \"adam\", \"lr\": 0.01, \"betas\": [0.8, 0.99], \"eps\": 1e-8, \"amsgrad\": true}",
               rule_adam, 1e-5);
    check_rule("{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.1}", rule_adamw, 1e-5);
    check_rule("{\"type\": \"adagrad\", \"lr\": 0.05}", rule_adagrad, 1e-5);
    check_rule("{\"type\": \"rmsprop\", \"lr\": 0.001}", rule_rmsprop, 1e-5);

    /* Other options are accepted and still change the weights. */
    {
        const char *configs[] = {
            "{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.5, \"dampening\": 0.1, \"weight_decay\": 0.01}",
            "{\"type\": \"adamw\"}",
            "{\"type\": \"adagrad\", \"lr_decay\": 0.1, \"initial_accumulator_value\": 0.1, \"eps\": 1e-9,"
            " \"weight_decay\": 0.01}",
            "{\"type\": \"rmsprop\", \"alpha\": 0.9, \"momentum\": 0.5, \"centered\": true, \"weight_decay\": 0.1,"
            " \"eps\": 1e-6}",
            "{\"type\": \"adam\", \"lr\": null}",
        };
        size_t i;
        for (i = 0; i < sizeof configs / sizeof configs[0]; ++i) {
            float before[NW], grad[NW], after[NW];
            CHECK(one_step(configs[i], before, grad, after) == 0);
            CHECK(changed(before, after));
        }
    }
}

static void test_lr(void)
{
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    double lr = -1.0;
    struct {
        const char *config;
        double lr;
    } defaults[] = {
        {"{\"type\": \"sgd\"}", 1e-3},         {"{\"type\": \"adam\"}", 1e-3},
        {"{\"type\": \"adamw\"}", 1e-3},       {"{\"type\": \"adagrad\"}", 1e-2},
        {"{\"type\": \"rmsprop\"}", 1e-2},     {"{\"type\": \"sgd\", \"lr\": 0.25}", 0.25},
        {"{\"type\": \"adam\", \"lr\": 0}", 0.0},
    };
    size_t i;

    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}", &m));
    for (i = 0; i < sizeof defaults / sizeof defaults[0]; ++i) {
        opt = NULL;
        CHECK_OK(accel_optimizer_create(m, defaults[i].config, &opt));
        lr = -1.0;
        CHECK_OK(accel_optimizer_get_lr(opt, &lr));
        CHECK(lr == defaults[i].lr);
        accel_optimizer_free(opt);
    }

    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    CHECK_OK(accel_optimizer_set_lr(opt, 0.5));
    CHECK_OK(accel_optimizer_get_lr(opt, &lr));
    CHECK(lr == 0.5);
    CHECK_OK(accel_optimizer_set_lr(opt, 0.0));
    CHECK_OK(accel_optimizer_get_lr(opt, &lr));
    CHECK(lr == 0.0);
    CHECK_OK(accel_optimizer_set_lr(opt, 3e-4));
    CHECK_FAILS(accel_optimizer_set_lr(opt, NAN), ACCEL_ERR_INVALID_ARGUMENT, "lr");
    CHECK_FAILS(accel_optimizer_set_lr(opt, -1.0), ACCEL_ERR_INVALID_ARGUMENT, "lr");
    CHECK_FAILS(accel_optimizer_set_lr(opt, -1e-12), ACCEL_ERR_INVALID_ARGUMENT, "lr");
    CHECK_FAILS(accel_optimizer_set_lr(opt, INFINITY), ACCEL_ERR_INVALID_ARGUMENT, "lr");
    CHECK_FAILS(accel_optimizer_set_lr(opt, -INFINITY), ACCEL_ERR_INVALID_ARGUMENT, "lr");
    /* Rejected values leave the lr alone. */
    CHECK_OK(accel_optimizer_get_lr(opt, &lr));
    CHECK(lr == 3e-4);

    /* NULL handles and outs. */
    CHECK_FAILS(accel_optimizer_get_lr(NULL, &lr), ACCEL_ERR_INVALID_ARGUMENT, "optimizer");
    CHECK_FAILS(accel_optimizer_get_lr(opt, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_optimizer_set_lr(NULL, 0.1), ACCEL_ERR_INVALID_ARGUMENT, "optimizer");
    CHECK_FAILS(accel_optimizer_step(NULL), ACCEL_ERR_INVALID_ARGUMENT, "optimizer");
    CHECK_FAILS(accel_optimizer_zero_grad(NULL), ACCEL_ERR_INVALID_ARGUMENT, "optimizer");
    {
        bool b;
        CHECK_FAILS(accel_optimizer_get_step_was_skipped(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "optimizer");
        CHECK_FAILS(accel_optimizer_get_step_was_skipped(opt, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    }

    /* A step without gradients changes nothing; zero_grad without gradients is fine. */
    {
        size_t n0 = 0, n1 = 0;
        float *w0 = model_tensor_f32(m, "0.weight", &n0), *w1;
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        w1 = model_tensor_f32(m, "0.weight", &n1);
        CHECK(n0 == 4 && n1 == 4 && w0 && w1 && memcmp(w0, w1, 4 * sizeof(float)) == 0);
        free(w0);
        free(w1);
    }

    /* The optimizer keeps the model's parameters alive: free the model first. */
    accel_model_free(m);
    CHECK_OK(accel_optimizer_step(opt));
    CHECK_OK(accel_optimizer_get_lr(opt, &lr));
    accel_optimizer_free(opt);
}

static void test_zero_grad(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *in, *target, *out = NULL, *loss = NULL, *g = NULL;
    float x[2] = {1, 2}, y[1] = {3};

    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 1]}", &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\"}", &opt));
    in = matrix_f32(x, 1, 2);
    target = matrix_f32(y, 1, 1);
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK_OK(accel_loss_compute("mse", out, target, &loss));
    CHECK_OK(accel_accelerator_backward(acc, loss));
    CHECK_OK(accel_model_get_gradient(m, "0.weight", &g));
    CHECK(g != NULL);
    accel_tensor_free(g);
    g = (accel_tensor_t *)&g;
    /* set_to_none: the gradient is gone afterwards. */
    CHECK_OK(accel_optimizer_zero_grad(opt));
    CHECK_OK(accel_model_get_gradient(m, "0.weight", &g));
    CHECK(g == NULL);
    accel_tensor_free(in);
    accel_tensor_free(target);
    accel_tensor_free(out);
    accel_tensor_free(loss);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

static void bad_config(accel_model_t *m, const char *json, accel_status_t status, const char *fragment, int line)
{
    accel_optimizer_t *opt = (accel_optimizer_t *)&opt;
    accel_status_t st = accel_optimizer_create(m, json, &opt);
    const char *msg = accel_last_error_message();
    ++capi_checks;
    if (st != status || strstr(msg, fragment) == NULL || opt != NULL) {
        ++capi_failures;
        fprintf(stderr, "%s:%d: config %s: expected %s with \"%s\", got %s: \"%s\"\n", __FILE__, line,
                json ? json : "NULL", accel_status_name(status), fragment, accel_status_name(st), msg);
    }
    if (st == ACCEL_OK) accel_optimizer_free(opt);
}
#define BAD_CONFIG(json, fragment) bad_config(m, json, ACCEL_ERR_INVALID_ARGUMENT, fragment, __LINE__)

static void test_param_groups(void)
{
    float before[NW], grad[NW], after[NW];
    int i, same = 1;
    /* "0.weight" is matched by the first group; the biases and "2.weight" are the rest. */
    check_rule("{\"type\": \"sgd\", \"lr\": 0.1, \"param_groups\": [{\"params\": [\"0.w*\"], \"lr\": 0.05,"
               " \"weight_decay\": 0.5}, {}]}",
               rule_group_own, 1e-6);
    /* The first group that matches wins ("0.weight": the second group, not the third). */
    check_rule("{\"type\": \"sgd\", \"lr\": 0.1, \"param_groups\": [{\"params\": [\"*.bias\"], \"lr\": 0.0},"
               " {\"params\": [\"0.weight\"]}, {\"params\": [\"0.*\", \"2.weight\"], \"lr\": 0.5}]}",
               rule_sgd, 1e-6);
    /* Groups with the top level's hyperparameters step exactly as one group (the group of the other parameters
     * first, as Hugging Face's scripts order them). */
    if (one_step("{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.1}", before, grad, after) == 0) {
        float b2[NW], g2[NW], a2[NW];
        CHECK(one_step("{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.1, \"param_groups\": [{}, "
                       "{\"params\": [\"*.bias\"]}]}",
                       b2, g2, a2) == 0);
        for (i = 0; i < NW; ++i) same = same && a2[i] == after[i];
        CHECK(same);
    }
}

static void test_bad_configs(void)
{
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}", &m));

    BAD_CONFIG("{\"type\": \"lbfgs\"}", "type");
    BAD_CONFIG("{\"type\": \"lbfgs\"}", "lbfgs");
    BAD_CONFIG("{\"lr\": 0.1}", "type: required");
    BAD_CONFIG("{\"type\": 1}", "type");
    BAD_CONFIG("{\"type\": \"sgd\", \"lr\": -1}", "lr");
    BAD_CONFIG("{\"type\": \"sgd\", \"lr\": -1}", "-1");
    BAD_CONFIG("{\"type\": \"adam\", \"lr\": \"0.1\"}", "lr");
    BAD_CONFIG("{\"type\": \"sgd\", \"nesterov\": true}", "nesterov");
    BAD_CONFIG("{\"type\": \"sgd\", \"nesterov\": true, \"momentum\": 0.9, \"dampening\": 0.5}", "nesterov");
    BAD_CONFIG("{\"type\": \"sgd\", \"momentum\": -0.5}", "momentum");
    BAD_CONFIG("{\"type\": \"sgd\", \"weight_decay\": -0.5}", "weight_decay");
    BAD_CONFIG("{\"type\": \"adam\", \"betas\": [0.9]}", "betas");
    BAD_CONFIG("{\"type\": \"adam\", \"betas\": [0.9, 0.99, 0.999]}", "betas");
    BAD_CONFIG("{\"type\": \"adamw\", \"betas\": [0.9, 1.5]}", "betas[1]");
    BAD_CONFIG("{\"type\": \"adamw\", \"betas\": [0.9, 1.0]}", "betas[1]");
    BAD_CONFIG("{\"type\": \"adam\", \"betas\": 0.9}", "betas");
    BAD_CONFIG("{\"type\": \"adam\", \"betas\": [\"0.9\", 0.99]}", "betas[0]");
    BAD_CONFIG("{\"type\": \"adam\", \"eps\": -1e-8}", "eps");
    BAD_CONFIG("{\"type\": \"adam\", \"amsgrad\": 1}", "amsgrad");
    BAD_CONFIG("{\"type\": \"sgd\", \"lr\": 0.1, \"lrr\": 0.1}", "lrr: unknown key");
    /* Keys of another optimizer type are unknown here. */
    BAD_CONFIG("{\"type\": \"adam\", \"momentum\": 0.9}", "momentum: unknown key");
    BAD_CONFIG("{\"type\": \"sgd\", \"betas\": [0.9, 0.99]}", "betas: unknown key");
    BAD_CONFIG("{\"type\": \"rmsprop\", \"nesterov\": false}", "nesterov: unknown key");
    BAD_CONFIG("{\"type\": \"adagrad\", \"lr_decay\": -1}", "lr_decay");
    /* past float's range (the state is float32; found by fuzz_optimizer_config): named, not ACCEL_ERR_UNKNOWN */
    BAD_CONFIG("{\"type\": \"adagrad\", \"initial_accumulator_value\": 1e308}", "initial_accumulator_value");
    BAD_CONFIG("{\"type\": \"rmsprop\", \"centered\": \"no\"}", "centered");
    /* param_groups */
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": {}}", "param_groups");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": []}", "param_groups: empty");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [1]}", "param_groups[0]");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": []}]}", "param_groups[0].params: empty");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": \"*\"}]}", "param_groups[0].params");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": [1]}]}", "param_groups[0].params[0]");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{}, {\"lr\": 0.1}]}", "param_groups[1]: a second group");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": [\"*\"], \"lr\": -1}]}", "param_groups[0].lr");
    BAD_CONFIG("{\"type\": \"adam\", \"param_groups\": [{\"params\": [\"*\"], \"momentum\": 0.9}]}",
               "param_groups[0].momentum: unknown key");
    BAD_CONFIG("{\"type\": \"adam\", \"param_groups\": [{\"params\": [\"*\"], \"type\": \"sgd\"}]}",
               "param_groups[0].type: unknown key");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": [\"*\"], \"nesterov\": true}]}",
               "param_groups[0].nesterov");
    /* Resolved against the model's names: a parameter no group takes, a group that takes none. */
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": [\"*.bias\"]}]}", "\"0.weight\" is in no group");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": [\"encoder.*\"]}, {}]}",
               "param_groups[0].params: takes no trainable parameter");
    BAD_CONFIG("{\"type\": \"sgd\", \"param_groups\": [{\"params\": [\"*\"]}, {}]}", "param_groups[1]: takes no");
    opt = (accel_optimizer_t *)&opt;
    CHECK_FAILS(accel_optimizer_create(m, "{\"type\": \"adagrad\", \"param_groups\": [{\"params\": [\"*\"], "
                                          "\"initial_accumulator_value\": 0.1}]}", &opt),
                ACCEL_ERR_UNIMPLEMENTED, "param_groups[0].initial_accumulator_value");
    CHECK(opt == NULL);
    BAD_CONFIG("{\"type\": \"sgd\"", "malformed JSON");
    BAD_CONFIG("[\"sgd\"]", "JSON object");
    BAD_CONFIG(NULL, "config_json");

    /* NULL model and out. */
    opt = (accel_optimizer_t *)&opt;
    CHECK_FAILS(accel_optimizer_create(NULL, "{\"type\": \"sgd\"}", &opt), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK(opt == NULL);
    CHECK_FAILS(accel_optimizer_create(m, "{\"type\": \"sgd\"}", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    accel_model_free(m);

    /* A model without parameters. */
    m = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}]}", &m));
    CHECK_FAILS(accel_optimizer_create(m, "{\"type\": \"sgd\"}", &opt), ACCEL_ERR_INVALID_ARGUMENT, "parameters");
    accel_model_free(m);
}

/* ---- parameter groups against Python's torch ----------------------------------------------------- */

#define PG_N 32
#define PG_STEPS 6

static int test_reference(void)
{
    const char *py = getenv("ACCEL_PYTHON"), *script = getenv("ACCEL_PG_REFERENCE");
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *sched = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *xt = NULL, *yt = NULL;
    FILE *f;
    char cmd[1200];
    int i, rc;
    if (py == NULL || py[0] == '\0' || script == NULL) {
        fprintf(stderr, "test_optimizer reference: ACCEL_PYTHON (with torch) and ACCEL_PG_REFERENCE must be set\n");
        return 1;
    }
    mlp_reference_data("pg_ref", PG_N, &xt, &yt);

    CHECK_OK(accel_random_set_seed(7, false, false));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [6, 16, 3]}", &m));
    /* Hugging Face's grouping: weight decay except on biases; the biases also at another lr and betas. */
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.1, \"param_groups\": "
                                       "[{}, {\"params\": [\"*.bias\"], \"weight_decay\": 0.0, \"lr\": 0.03,"
                                       " \"betas\": [0.8, 0.99]}]}", &opt));
    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"linear\", \"num_warmup_steps\": 2, \"num_training_steps\": 10}",
                                    &sched));
    CHECK_OK(accel_dataloader_create_from_tensors(xt, yt, "{\"batch_size\": 32, \"shuffle\": false}", &dl));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, sched));
    CHECK_OK(accel_accelerator_save_model(acc, m, "pg_ref/init", NULL));
    f = fopen("pg_ref/losses.txt", "w");
    CHECK(f != NULL);
    for (i = 0; i < PG_STEPS && f != NULL; ++i) {
        accel_batch_t *b = NULL;
        double loss = 0;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) CHECK_OK(accel_dataloader_next(dl, &b));
        CHECK_OK(accel_accelerator_train_step(acc, m, opt, sched, b, "cross_entropy", &loss));
        fprintf(f, "%a\n", loss);
        accel_batch_free(b);
    }
    if (f != NULL) fclose(f);
    CHECK_OK(accel_accelerator_save_state(acc, "pg_ref/state"));
    snprintf(cmd, sizeof cmd, "'%s' '%s' pg_ref %d", py, script, PG_STEPS);
    rc = system(cmd);
    CHECK(rc == 0);
    accel_dataloader_free(dl);
    accel_scheduler_free(sched);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(xt);
    accel_tensor_free(yt);
    accel_accelerator_free(acc);
    return capi_report("test_optimizer reference");
}

/* "lomo" with accel_accelerator_lomo_backward: without clipping or weight decay its update is SGD's, applied
 * during backward (the same weights as a plain backward and an "sgd" step); the refusals name their reason. */
static void test_lomo(void)
{
    float before[NW], grad[NW], want[NW], got[NW];
    float x[2 * 3] = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
    float y[2 * 2] = {1.0f, -1.0f, 0.0f, 2.0f};
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *in = matrix_f32(x, 2, 3), *target = matrix_f32(y, 2, 2), *out = NULL, *loss = NULL, *w = NULL;

    CHECK(one_step("{\"type\": \"sgd\", \"lr\": 0.1}", before, grad, want) == 0);
    CHECK_OK(accel_random_set_seed(1234, false, false));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [3, 4, 2]}", &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"lomo\"}", &opt));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    if (m == NULL || opt == NULL || acc == NULL) goto done;
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK_OK(accel_loss_compute("mse", out, target, &loss));
    /* No lomo optimizer prepared yet. */
    CHECK_FAILS(accel_accelerator_lomo_backward(acc, loss, 0.1), ACCEL_ERR_FAILED_PRECONDITION,
                "no prepared optimizer is of type \"lomo\"");
    CHECK_OK(accel_accelerator_prepare_optimizer(acc, opt));
    CHECK_FAILS(accel_accelerator_lomo_backward(NULL, loss, 0.1), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_lomo_backward(acc, NULL, 0.1), ACCEL_ERR_INVALID_ARGUMENT, "loss");
    CHECK_FAILS(accel_accelerator_lomo_backward(acc, loss, -0.5), ACCEL_ERR_INVALID_ARGUMENT, "learning_rate");
    CHECK_OK(accel_accelerator_lomo_backward(acc, loss, 0.1));
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &w));
    if (w != NULL && read_f32(w, got, NW) == 0) CHECK(max_abs_diff_f32(got, want, NW) <= 1e-6);
    CHECK(changed(before, got));
    CHECK_FAILS(accel_optimizer_step(opt), ACCEL_ERR_FAILED_PRECONDITION, "accel_accelerator_lomo_backward");
done:
    accel_tensor_free(w);
    accel_tensor_free(loss);
    accel_tensor_free(out);
    accel_tensor_free(in);
    accel_tensor_free(target);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "reference") == 0) return test_reference();
    test_each_type_steps();
    test_param_groups();
    test_lr();
    test_zero_grad();
    test_bad_configs();
    test_lomo();
    return capi_report("test_optimizer");
}
