/* accel/scheduler.h: each schedule's lr sequence against hand-computed values, bad configs, and the rules
 * of a prepared scheduler (AcceleratedScheduler) under gradient accumulation. */
#include "capi_helpers.h"

static accel_model_t *g_model = NULL;

static accel_optimizer_t *make_optimizer(double lr)
{
    char json[96];
    accel_optimizer_t *opt = NULL;
    snprintf(json, sizeof json, "{\"type\": \"sgd\", \"lr\": %.17g}", lr);
    CHECK_OK(accel_optimizer_create(g_model, json, &opt));
    return opt;
}

/* Creates the scheduler over an optimizer with `base_lr`, then checks get_last_lr (and the optimizer's lr)
 * at step 0 (creation) and after each of the following steps. */
static void check_sequence(const char *config, double base_lr, const double *expect, size_t count, int line)
{
    accel_optimizer_t *opt = make_optimizer(base_lr);
    accel_scheduler_t *s = NULL;
    size_t k;
    int reported = 0;

    CHECK_OK(accel_scheduler_create(opt, config, &s));
    if (s == NULL) {
        accel_optimizer_free(opt);
        return;
    }
    for (k = 0; k < count; ++k) {
        double lr = -1.0, opt_lr = -1.0;
        int64_t n = -1;
        if (k > 0) CHECK_OK(accel_scheduler_step(s));
        CHECK_OK(accel_scheduler_get_last_lr(s, &lr));
        CHECK_OK(accel_optimizer_get_lr(opt, &opt_lr));
        CHECK_OK(accel_scheduler_get_step_count(s, &n));
        ++capi_checks;
        if (fabs(lr - expect[k]) > 1e-12 || fabs(opt_lr - expect[k]) > 1e-12 || n != (int64_t)k) {
            ++capi_failures;
            if (!reported)
                fprintf(stderr, "%s:%d: %s: step %lu: lr %.15g (optimizer %.15g, count %ld), expected %.15g\n",
                        __FILE__, line, config, (unsigned long)k, lr, opt_lr, (long)n, expect[k]);
            reported = 1;
        }
    }
    accel_scheduler_free(s);
    accel_optimizer_free(opt);
}
#define SEQUENCE(config, base, ...)                                                                       \
    do {                                                                                                  \
        const double expect_[] = {__VA_ARGS__};                                                           \
        check_sequence(config, base, expect_, sizeof expect_ / sizeof expect_[0], __LINE__);             \
    } while (0)

static void test_sequences(void)
{
    /* transformers.get_constant_schedule: always the base lr. */
    SEQUENCE("{\"type\": \"constant\"}", 0.1, 0.1, 0.1, 0.1, 0.1);
    /* get_constant_schedule_with_warmup(W=3): step / 3 while warming up, then 1. */
    SEQUENCE("{\"type\": \"constant\", \"num_warmup_steps\": 3}", 0.3, 0.0, 0.1, 0.2, 0.3, 0.3, 0.3);
    /* get_linear_schedule_with_warmup(W=2, T=10), base 0.8:
     * s<2: s/2; else max(0, (10 - s) / 8). */
    SEQUENCE("{\"type\": \"linear\", \"num_warmup_steps\": 2, \"num_training_steps\": 10}", 0.8,
             0.0, 0.4, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0);
    /* No warmup: (T - s) / T. */
    SEQUENCE("{\"type\": \"linear\", \"num_training_steps\": 4}", 1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0);
    /* get_cosine_schedule_with_warmup(W=2, T=10, num_cycles=0.5), base 1:
     * s<2: s/2; else 0.5 * (1 + cos(pi * (s - 2) / 8)). */
    SEQUENCE("{\"type\": \"cosine\", \"num_warmup_steps\": 2, \"num_training_steps\": 10}", 1.0,
             0.0, 0.5, 1.0, 0.96193976625564337, 0.85355339059327373, 0.69134171618254492, 0.5,
             0.30865828381745508, 0.14644660940672627, 0.038060233744356631, 0.0, 0.038060233744356631);
    /* num_cycles 1 over 4 steps: 0.5 * (1 + cos(2 pi s / 4)), base 2. */
    SEQUENCE("{\"type\": \"cosine\", \"num_training_steps\": 4, \"num_cycles\": 1.0}", 2.0,
             2.0, 1.0, 0.0, 1.0, 2.0);
    /* get_polynomial_decay_schedule_with_warmup(W=2, T=6, lr_end=0.1, power=2), base 0.5:
     * s<2: s/2 * 0.5; s<=6: (0.5 - 0.1) * (1 - (s - 2) / 4)^2 + 0.1; s>6: 0.1. */
    SEQUENCE("{\"type\": \"polynomial\", \"num_warmup_steps\": 2, \"num_training_steps\": 6, \"lr_end\": 0.1,"
             " \"power\": 2.0}",
             0.5, 0.0, 0.25, 0.5, 0.325, 0.2, 0.125, 0.1, 0.1, 0.1);
    /* Defaults: lr_end 1e-7, power 1 (linear decay to lr_end). */
    SEQUENCE("{\"type\": \"polynomial\", \"num_training_steps\": 2}", 1.0, 1.0, 0.50000005, 1e-7, 1e-7);
    /* torch.optim.lr_scheduler.StepLR(step_size=3, gamma=0.5), base 0.4. */
    SEQUENCE("{\"type\": \"step\", \"step_size\": 3, \"gamma\": 0.5}", 0.4,
             0.4, 0.4, 0.4, 0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.05);
    /* StepLR default gamma 0.1. */
    SEQUENCE("{\"type\": \"step\", \"step_size\": 1}", 1.0, 1.0, 0.1, 0.01, 0.001);
    /* ExponentialLR(gamma=0.9), base 0.1. */
    SEQUENCE("{\"type\": \"exponential\", \"gamma\": 0.9}", 0.1, 0.1, 0.09, 0.081, 0.0729, 0.06561);
}

static void bad_config(const char *json, double base_lr, const char *fragment, int line)
{
    accel_optimizer_t *opt = make_optimizer(base_lr);
    accel_scheduler_t *s = (accel_scheduler_t *)&s;
    accel_status_t st = accel_scheduler_create(opt, json, &s);
    const char *msg = accel_last_error_message();
    double lr = -1.0;
    ++capi_checks;
    if (st != ACCEL_ERR_INVALID_ARGUMENT || strstr(msg, fragment) == NULL || s != NULL) {
        ++capi_failures;
        fprintf(stderr, "%s:%d: config %s: expected ACCEL_ERR_INVALID_ARGUMENT with \"%s\", got %s: \"%s\"\n",
                __FILE__, line, json ? json : "NULL", fragment, accel_status_name(st), msg);
    }
    if (st == ACCEL_OK) accel_scheduler_free(s);
    /* A rejected scheduler leaves the optimizer's lr alone. */
    CHECK_OK(accel_optimizer_get_lr(opt, &lr));
    CHECK(lr == base_lr);
    accel_optimizer_free(opt);
}
#define BAD_CONFIG(json, fragment) bad_config(json, 0.1, fragment, __LINE__)

static void test_bad_configs(void)
{
    accel_optimizer_t *opt = make_optimizer(0.1);
    accel_scheduler_t *s = (accel_scheduler_t *)&s;
    double lr;
    int64_t n;

    BAD_CONFIG("{\"type\": \"linear\", \"num_warmup_steps\": 2}", "num_training_steps");
    BAD_CONFIG("{\"type\": \"cosine\"}", "num_training_steps");
    BAD_CONFIG("{\"type\": \"polynomial\"}", "num_training_steps");
    BAD_CONFIG("{\"type\": \"linear\", \"num_training_steps\": 0}", "num_training_steps");
    BAD_CONFIG("{\"type\": \"linear\", \"num_training_steps\": \"10\"}", "num_training_steps");
    BAD_CONFIG("{\"type\": \"linear\", \"num_warmup_steps\": 11, \"num_training_steps\": 10}", "num_warmup_steps");
    BAD_CONFIG("{\"type\": \"cosine\", \"num_warmup_steps\": 5, \"num_training_steps\": 4}", "num_warmup_steps");
    BAD_CONFIG("{\"type\": \"constant\", \"num_warmup_steps\": -1}", "num_warmup_steps");
    BAD_CONFIG("{\"type\": \"step\", \"step_size\": 0}", "step_size");
    BAD_CONFIG("{\"type\": \"step\", \"step_size\": -2}", "step_size");
    BAD_CONFIG("{\"type\": \"step\"}", "step_size");
    BAD_CONFIG("{\"type\": \"step\", \"step_size\": 2, \"gamma\": 0}", "gamma");
    BAD_CONFIG("{\"type\": \"exponential\", \"gamma\": 0}", "gamma");
    BAD_CONFIG("{\"type\": \"exponential\", \"gamma\": -0.5}", "gamma");
    BAD_CONFIG("{\"type\": \"exponential\"}", "gamma");
    BAD_CONFIG("{\"type\": \"cosine\", \"num_training_steps\": 4, \"num_cycles\": 0}", "num_cycles");
    BAD_CONFIG("{\"type\": \"polynomial\", \"num_training_steps\": 4, \"power\": 0}", "power");
    BAD_CONFIG("{\"type\": \"polynomial\", \"num_training_steps\": 4, \"lr_end\": -1}", "lr_end");
    BAD_CONFIG("{\"type\": \"polynomial\", \"num_training_steps\": 4, \"lr_end\": 0.5}", "lr_end");
    BAD_CONFIG("{\"type\": \"onecycle\"}", "type");
    BAD_CONFIG("{\"type\": \"onecycle\"}", "onecycle");
    BAD_CONFIG("{\"num_training_steps\": 4}", "type: required");
    BAD_CONFIG("{\"type\": \"linear\", \"num_training_steps\": 4, \"step_size\": 2}", "step_size: unknown key");
    BAD_CONFIG("{\"type\": \"exponential\", \"gamma\": 0.9, \"num_warmup_steps\": 1}",
               "num_warmup_steps: unknown key");
    BAD_CONFIG("{\"type\": \"constant\", \"warmup\": 1}", "warmup: unknown key");
    BAD_CONFIG("{\"type\": \"constant\"", "malformed JSON");
    BAD_CONFIG("[]", "JSON object");
    BAD_CONFIG(NULL, "config_json");

    CHECK_FAILS(accel_scheduler_create(NULL, "{\"type\": \"constant\"}", &s), ACCEL_ERR_INVALID_ARGUMENT,
                "optimizer");
    CHECK(s == NULL);
    CHECK_FAILS(accel_scheduler_create(opt, "{\"type\": \"constant\"}", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_scheduler_step(NULL), ACCEL_ERR_INVALID_ARGUMENT, "scheduler");
    CHECK_FAILS(accel_scheduler_get_last_lr(NULL, &lr), ACCEL_ERR_INVALID_ARGUMENT, "scheduler");
    CHECK_FAILS(accel_scheduler_get_step_count(NULL, &n), ACCEL_ERR_INVALID_ARGUMENT, "scheduler");
    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"constant\"}", &s));
    CHECK_FAILS(accel_scheduler_get_last_lr(s, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_scheduler_get_step_count(s, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");

    /* The scheduler keeps its optimizer alive: free the optimizer first. */
    accel_optimizer_free(opt);
    CHECK_OK(accel_scheduler_step(s));
    CHECK_OK(accel_scheduler_get_step_count(s, &n));
    CHECK(n == 1);
    accel_scheduler_free(s);
}

/* A prepared scheduler under accumulate(): it steps only on sync micro-steps. */
static void test_prepared_with_accumulation(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *s = NULL;
    int micro;
    int64_t count = -1;
    double lr = -1.0;

    CHECK_OK(accel_accelerator_create("{\"gradient_accumulation_steps\": 2}", &acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}", &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 1.0}", &opt));
    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"linear\", \"num_training_steps\": 10}", &s));

    /* The scheduler's optimizer must be prepared first. */
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_FAILS(accel_accelerator_prepare_scheduler(acc, s), ACCEL_ERR_FAILED_PRECONDITION, "optimizer");
    CHECK_OK(accel_accelerator_prepare_optimizer(acc, opt));
    CHECK_OK(accel_accelerator_prepare_scheduler(acc, s));
    CHECK_OK(accel_accelerator_prepare_scheduler(acc, s)); /* twice with the same accelerator: a no-op */

    for (micro = 1; micro <= 6; ++micro) {
        bool sync = false;
        CHECK_OK(accel_accelerator_accumulate_begin(acc, m));
        CHECK_OK(accel_accelerator_get_sync_gradients(acc, &sync));
        CHECK(sync == (micro % 2 == 0));
        CHECK_OK(accel_scheduler_step(s));
        CHECK_OK(accel_accelerator_accumulate_end(acc));
        CHECK_OK(accel_scheduler_get_step_count(s, &count));
        CHECK(count == micro / 2);
        CHECK_OK(accel_scheduler_get_last_lr(s, &lr));
        CHECK_NEAR(lr, (10.0 - (double)(micro / 2)) / 10.0, 1e-12);
    }

    accel_scheduler_free(s);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* step_scheduler_with_optimizer false: the prepared scheduler steps on every call. */
static void test_prepared_not_with_optimizer(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *s = NULL;
    int micro;
    int64_t count = -1;

    CHECK_OK(accel_accelerator_create("{\"gradient_accumulation_steps\": 2, "
                                      "\"step_scheduler_with_optimizer\": false}",
                                      &acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}", &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 1.0}", &opt));
    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"exponential\", \"gamma\": 0.5}", &s));
    /* prepare() with all at once orders scheduler last. */
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, s));
    for (micro = 1; micro <= 4; ++micro) {
        CHECK_OK(accel_accelerator_accumulate_begin(acc, m));
        CHECK_OK(accel_scheduler_step(s));
        CHECK_OK(accel_accelerator_accumulate_end(acc));
        CHECK_OK(accel_scheduler_get_step_count(s, &count));
        CHECK(count == micro);
    }
    {
        double lr = -1.0;
        CHECK_OK(accel_scheduler_get_last_lr(s, &lr));
        CHECK(lr == 0.0625);
    }
    accel_accelerator_free(acc); /* first: the prepared objects keep its state alive */
    CHECK_OK(accel_scheduler_step(s));
    accel_scheduler_free(s);
    accel_optimizer_free(opt);
    accel_model_free(m);
}

int main(void)
{
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}", &g_model));
    test_sequences();
    test_bad_configs();
    test_prepared_with_accumulation();
    test_prepared_not_with_optimizer();
    accel_model_free(g_model);
    return capi_report("test_scheduler");
}
