/* accel/accelerator.h, accel/loss.h, accel/checkpoint.h: configuration, preparation and call-order rules,
 * NULL handling, lifetimes, process facts, clipping, train_step, and the named losses. */
#include "capi_helpers.h"

static accel_accelerator_t *make_acc(const char *json)
{
    accel_accelerator_t *acc = NULL;
    CHECK_OK(accel_accelerator_create(json, &acc));
    CHECK(acc != NULL);
    return acc;
}

static accel_model_t *make_model(const char *json)
{
    accel_model_t *m = NULL;
    CHECK_OK(accel_model_create_from_json(json, &m));
    return m;
}

static accel_optimizer_t *make_sgd(accel_model_t *m, double lr)
{
    char json[80];
    accel_optimizer_t *opt = NULL;
    snprintf(json, sizeof json, "{\"type\": \"sgd\", \"lr\": %g}", lr);
    CHECK_OK(accel_optimizer_create(m, json, &opt));
    return opt;
}

/* A loader over [n, in] features and float [n, out] labels (row i all i / 10). */
static accel_dataloader_t *make_loader(int64_t n, int64_t in, int64_t out, const char *config)
{
    float *x = (float *)malloc((size_t)(n * in) * sizeof(float));
    float *y = (float *)malloc((size_t)(n * out) * sizeof(float));
    accel_tensor_t *tx, *ty;
    accel_dataloader_t *dl = NULL;
    int64_t i;
    for (i = 0; i < n * in; ++i) x[i] = (float)(i / in) / 10.0f;
    for (i = 0; i < n * out; ++i) y[i] = (float)(i / out) / 10.0f;
    tx = matrix_f32(x, n, in);
    ty = matrix_f32(y, n, out);
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, config, &dl));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    free(x);
    free(y);
    return dl;
}

static int contains(const char *haystack, const char *needle)
{
    return haystack != NULL && strstr(haystack, needle) != NULL;
}

static void test_create_and_config(void)
{
    accel_accelerator_t *acc;
    char *json = NULL;
    int64_t steps = -1;
    accel_mixed_precision_t mp = -1;

    acc = make_acc(NULL);
    CHECK_OK(accel_accelerator_get_config_json(acc, &json));
    CHECK(contains(json, "\"gradient_accumulation_steps\":1"));
    CHECK(contains(json, "\"mixed_precision\":\"no\""));
    CHECK(contains(json, "\"split_batches\":false"));
    CHECK(contains(json, "\"even_batches\":true"));
    CHECK(contains(json, "\"sync_with_dataloader\":true"));
    CHECK(contains(json, "\"step_scheduler_with_optimizer\":true"));
    CHECK(contains(json, "\"rng_types\":[\"generator\"]"));
    CHECK(contains(json, "\"device_placement\":true"));
    CHECK(contains(json, "\"world_size\":1"));
    CHECK(contains(json, "\"deepspeed_plugin\":null"));
    accel_string_free(json);
    json = NULL;
    CHECK_OK(accel_accelerator_get_gradient_accumulation_steps(acc, &steps));
    CHECK(steps == 1);
    CHECK_OK(accel_accelerator_get_mixed_precision(acc, &mp));
    CHECK(mp == ACCEL_MIXED_PRECISION_NO);
    accel_accelerator_free(acc);

    acc = make_acc("{}");
    CHECK_OK(accel_accelerator_get_config_json(acc, &json));
    CHECK(contains(json, "\"gradient_accumulation_steps\":1"));
    accel_string_free(json);
    json = NULL;
    accel_accelerator_free(acc);

    /* Given values show up in the effective configuration. */
    acc = make_acc("{\"mixed_precision\": \"bf16\", \"gradient_accumulation_steps\": 4, \"split_batches\": true,"
                   " \"step_scheduler_with_optimizer\": false, \"rng_types\": [\"torch\", \"generator\"],"
                   " \"dataloader_config\": {\"even_batches\": false, \"data_seed\": 3},"
                   " \"kwargs_handlers\": {\"autocast\": {\"cache_enabled\": false},"
                   "   \"ddp\": {\"bucket_cap_mb\": 25, \"find_unused_parameters\": false}},"
                   " \"deepspeed_plugin\": null, \"project_config\": {}, \"cpu\": true}");
    CHECK_OK(accel_accelerator_get_config_json(acc, &json));
    CHECK(contains(json, "\"gradient_accumulation_steps\":4"));
    CHECK(contains(json, "\"num_steps\":4"));
    CHECK(contains(json, "\"mixed_precision\":\"bf16\""));
    CHECK(contains(json, "\"split_batches\":true"));
    CHECK(contains(json, "\"step_scheduler_with_optimizer\":false"));
    CHECK(contains(json, "\"rng_types\":[\"torch\",\"generator\"]"));
    CHECK(contains(json, "\"even_batches\":false"));
    CHECK(contains(json, "\"data_seed\":3"));
    CHECK(contains(json, "\"cache_enabled\":false"));
    CHECK(contains(json, "\"cpu\":true"));
    accel_string_free(json);
    CHECK_OK(accel_accelerator_get_gradient_accumulation_steps(acc, &steps));
    CHECK(steps == 4);
    CHECK_OK(accel_accelerator_get_mixed_precision(acc, &mp));
    CHECK(mp == ACCEL_MIXED_PRECISION_BF16);
    accel_accelerator_free(acc);

    /* The plugin form. */
    acc = make_acc("{\"gradient_accumulation_plugin\": {\"num_steps\": 3, \"sync_with_dataloader\": false}}");
    CHECK_OK(accel_accelerator_get_gradient_accumulation_steps(acc, &steps));
    CHECK(steps == 3);
    json = NULL;
    CHECK_OK(accel_accelerator_get_config_json(acc, &json));
    CHECK(contains(json, "\"sync_with_dataloader\":false"));
    accel_string_free(json);
    accel_accelerator_free(acc);
    /* fp8 is emulated; DDP kwargs are accepted (they act once several processes train). */
    acc = make_acc("{\"mixed_precision\": \"fp8\", \"kwargs_handlers\": {\"ddp\": {\"bucket_cap_mb\": 50}}}");
    CHECK_OK(accel_accelerator_get_mixed_precision(acc, &mp));
    CHECK(mp == ACCEL_MIXED_PRECISION_FP8);
    accel_accelerator_free(acc);
    /* gradient_accumulation_steps 1 (the default) beside a plugin is fine, as in Accelerate. */
    acc = make_acc("{\"gradient_accumulation_steps\": 1, \"gradient_accumulation_plugin\": {\"num_steps\": 2}}");
    CHECK_OK(accel_accelerator_get_gradient_accumulation_steps(acc, &steps));
    CHECK(steps == 2);
    accel_accelerator_free(acc);
}

static void bad(const char *json, accel_status_t status, const char *fragment, int line)
{
    accel_accelerator_t *acc = (accel_accelerator_t *)&acc;
    accel_status_t st = accel_accelerator_create(json, &acc);
    const char *msg = accel_last_error_message();
    ++capi_checks;
    if (st != status || strstr(msg, fragment) == NULL || acc != NULL) {
        ++capi_failures;
        fprintf(stderr, "%s:%d: config %s: expected %s with \"%s\", got %s: \"%s\"\n", __FILE__, line, json,
                accel_status_name(status), fragment, accel_status_name(st), msg);
    }
    if (st == ACCEL_OK) accel_accelerator_free(acc);
}
#define BAD(json, fragment) bad(json, ACCEL_ERR_INVALID_ARGUMENT, fragment, __LINE__)
#define UNIMPL(json, fragment) bad(json, ACCEL_ERR_UNIMPLEMENTED, fragment, __LINE__)

/* Whether accel_build_info_json lists "fp16" among the mixed precisions this LibTorch can run. */
static int fp16_available(void)
{
    char *info = NULL;
    CHECK_OK(accel_build_info_json(&info));
    const char *mp = info ? strstr(info, "\"mixed_precision\":[") : NULL;
    const char *end = mp ? strchr(mp, ']') : NULL;
    const char *fp16 = mp ? strstr(mp, "\"fp16\"") : NULL;
    CHECK(end != NULL);
    int yes = fp16 != NULL && fp16 < end;
    accel_string_free(info);
    return yes;
}

/* Whether an accelerator with the defaults computes on a GPU. */
static int gpu_visible(void)
{
    accel_accelerator_t *acc = NULL;
    char *device = NULL;
    int yes;
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_get_device(acc, &device));
    yes = device != NULL && strncmp(device, "cuda", 4) == 0;
    accel_string_free(device);
    accel_accelerator_free(acc);
    return yes;
}

static void test_bad_configs(void)
{
    CHECK_FAILS(accel_accelerator_create("{}", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");

    BAD("{\"gradient_accumulation_steps\": 4", "malformed JSON");
    BAD("{\"gradient_accumulation_steps\": 4", "config_json");
    BAD("not json", "malformed JSON");
    BAD("[]", "JSON object");
    BAD("{\"gradient_accumulation_step\": 4}", "gradient_accumulation_step: unknown key");
    BAD("{\"gradient_accumulation_steps\": \"4\"}", "gradient_accumulation_steps");
    BAD("{\"gradient_accumulation_steps\": \"4\"}", "\"4\"");
    BAD("{\"gradient_accumulation_steps\": 0}", "gradient_accumulation_steps");
    BAD("{\"gradient_accumulation_steps\": -2}", "gradient_accumulation_steps");
    BAD("{\"gradient_accumulation_steps\": 1.5}", "gradient_accumulation_steps");
    BAD("{\"mixed_precision\": \"fp64\"}", "mixed_precision");
    BAD("{\"mixed_precision\": \"fp64\"}", "fp64");
    BAD("{\"mixed_precision\": 16}", "mixed_precision");
    /* LibTorch 1.13 has no fp16 kernels on the CPU (2.x has them, and accepts fp16). */
    if (!fp16_available()) UNIMPL("{\"mixed_precision\": \"fp16\"}", "mixed_precision");
    BAD("{\"deepspeed_plugin\": {\"zero_stage\": 5}}", "deepspeed_plugin.zero_stage");
    BAD("{\"fsdp_plugin\": {\"sharding_strategy\": \"HALF_SHARD\"}}", "fsdp_plugin.sharding_strategy");
    BAD("{\"deepspeed_plugin\": {\"zero_stage\": 1, \"offload_param_device\": \"nvme\"}}", "deepspeed_plugin.offload_param_device");
    UNIMPL("{\"megatron_lm_plugin\": {\"train_iters\": 10}}", "megatron_lm_plugin.train_iters");
    UNIMPL("{\"kwargs_handlers\": {\"ddp\": {\"comm_hook\": \"power_sgd\"}}}", "kwargs_handlers.ddp.comm_hook");
    BAD("{\"kwargs_handlers\": {\"ddp\": {\"bucket_cap_mb\": \"25MB\"}}}", "kwargs_handlers.ddp.bucket_cap_mb");
    BAD("{\"kwargs_handlers\": {\"ddp\": {\"bucket_cap_mb\": \"25MB\"}}}", "25MB");
    BAD("{\"kwargs_handlers\": {\"ddp\": {\"bucket_cap\": 25}}}", "kwargs_handlers.ddp.bucket_cap: unknown key");
    BAD("{\"kwargs_handlers\": {\"autocast\": {\"enabled\": \"yes\"}}}", "kwargs_handlers.autocast.enabled");
    BAD("{\"kwargs_handlers\": {\"autocast\": {\"dtype\": \"bf16\"}}}", "kwargs_handlers.autocast.dtype");
    BAD("{\"kwargs_handlers\": {\"grad_scalar\": {}}}", "kwargs_handlers.grad_scalar: unknown key");
    BAD("{\"kwargs_handlers\": []}", "kwargs_handlers");
    BAD("{\"gradient_accumulation_steps\": 4, \"gradient_accumulation_plugin\": {\"num_steps\": 4}}",
        "gradient_accumulation_plugin");
    BAD("{\"gradient_accumulation_plugin\": {\"num_steps\": 0}}", "gradient_accumulation_plugin.num_steps");
    BAD("{\"gradient_accumulation_plugin\": {\"steps\": 2}}", "gradient_accumulation_plugin.steps: unknown key");
    BAD("{\"dataloader_config\": {\"even_batches\": 1}}", "dataloader_config.even_batches");
    BAD("{\"dataloader_config\": {\"drop_last\": true}}", "dataloader_config.drop_last: unknown key");
    BAD("{\"device_placement\": false, \"dataloader_config\": {\"dispatch_batches\": true}}",
        "dataloader_config.dispatch_batches: true requires device_placement: true");
    BAD("{\"rng_types\": [\"bogus\"]}", "rng_types[0]");
    BAD("{\"rng_types\": \"torch\"}", "rng_types");
    if (!gpu_visible()) UNIMPL("{\"rng_types\": [\"torch\", \"cuda\"]}", "rng_types[1]");
    BAD("{\"split_batches\": \"no\"}", "split_batches");
    BAD("{\"project_config\": {\"total_limit\": -1}}", "project_config.total_limit");
    BAD("{\"project_config\": {\"dir\": \"runs\"}}", "project_config.dir: unknown key");
    UNIMPL("{\"dynamo_backend\": \"inductor\"}", "dynamo_backend");
    UNIMPL("{\"log_with\": [\"wandb\"]}", "log_with");
    BAD("{\"log_with\": [\"tensorboard\"]}", "log_with: \"tensorboard\" writes files under project_config.logging_dir");
}

static void test_getters_null(void)
{
    accel_accelerator_t *acc = make_acc(NULL);
    bool b = false;
    int64_t i64 = -1;
    int32_t i32 = -1;
    accel_mixed_precision_t mp;
    char *s = NULL;

    /* NULL accelerator. */
    CHECK_FAILS(accel_accelerator_get_config_json(NULL, &s), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_sync_gradients(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_step(NULL, &i64), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_gradient_accumulation_steps(NULL, &i64), ACCEL_ERR_INVALID_ARGUMENT,
                "accelerator");
    CHECK_FAILS(accel_accelerator_get_end_of_dataloader(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_mixed_precision(NULL, &mp), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_optimizer_step_was_skipped(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_process_index(NULL, &i32), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_local_process_index(NULL, &i32), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_num_processes(NULL, &i32), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_is_main_process(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_is_local_main_process(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_print(NULL, "x"), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_accumulate_begin(NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_accumulate_end(NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_prepare(NULL, NULL, NULL, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_save_state(NULL, "ckpt"), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_load_state(NULL, "ckpt"), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");

    /* NULL out. */
    CHECK_FAILS(accel_accelerator_get_config_json(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_sync_gradients(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_step(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_gradient_accumulation_steps(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_end_of_dataloader(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_mixed_precision(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_optimizer_step_was_skipped(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_process_index(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_local_process_index(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_num_processes(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_is_main_process(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_is_local_main_process(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_process_get_index(NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_process_get_count(NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_process_is_main(NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_print(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "text");

    /* NULL objects to prepare. */
    CHECK_FAILS(accel_accelerator_prepare_model(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK_FAILS(accel_accelerator_prepare_optimizer(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "optimizer");
    CHECK_FAILS(accel_accelerator_prepare_dataloader(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "dataloader");
    CHECK_FAILS(accel_accelerator_prepare_scheduler(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "scheduler");
    CHECK_OK(accel_accelerator_prepare(acc, NULL, NULL, NULL, NULL)); /* nothing to do */
    CHECK_FAILS(accel_accelerator_backward(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "loss");
    CHECK_FAILS(accel_accelerator_backward(NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    {
        accel_model_t *u = (accel_model_t *)&u;
        CHECK_FAILS(accel_accelerator_unwrap_model(acc, NULL, &u), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK(u == NULL);
        CHECK_FAILS(accel_accelerator_clip_grad_norm(acc, NULL, 1.0, 2.0, NULL), ACCEL_ERR_INVALID_ARGUMENT,
                    "model");
        CHECK_FAILS(accel_accelerator_clip_grad_value(acc, NULL, 1.0), ACCEL_ERR_INVALID_ARGUMENT, "model");
    }

    /* Fresh state: step 0, syncing, not at the end of a loader, nothing skipped. */
    CHECK_OK(accel_accelerator_get_step(acc, &i64));
    CHECK(i64 == 0);
    CHECK_OK(accel_accelerator_get_sync_gradients(acc, &b));
    CHECK(b);
    CHECK_OK(accel_accelerator_get_end_of_dataloader(acc, &b));
    CHECK(!b);
    b = true;
    CHECK_OK(accel_accelerator_optimizer_step_was_skipped(acc, &b));
    CHECK(!b);
    accel_accelerator_free(acc);
}

static void test_process_facts_and_print(void)
{
    accel_accelerator_t *acc = make_acc(NULL);
    int32_t i = -1;
    bool b = false;

    CHECK_OK(accel_process_get_index(&i));
    CHECK(i == 0);
    CHECK_OK(accel_process_get_count(&i));
    CHECK(i == 1);
    CHECK_OK(accel_process_is_main(&b));
    CHECK(b);
    i = -1;
    CHECK_OK(accel_accelerator_get_process_index(acc, &i));
    CHECK(i == 0);
    i = -1;
    CHECK_OK(accel_accelerator_get_local_process_index(acc, &i));
    CHECK(i == 0);
    CHECK_OK(accel_accelerator_get_num_processes(acc, &i));
    CHECK(i == 1);
    b = false;
    CHECK_OK(accel_accelerator_is_main_process(acc, &b));
    CHECK(b);
    b = false;
    CHECK_OK(accel_accelerator_is_local_main_process(acc, &b));
    CHECK(b);

    fflush(stdout);
    CHECK_OK(accel_accelerator_print(acc, "accel_accelerator_print: hello from the main process"));
    CHECK_OK(accel_accelerator_print(acc, ""));

    /* Checkpoints (test_checkpoint.c covers them): a missing folder, and no folder without automatic naming. */
    CHECK_FAILS(accel_accelerator_load_state(acc, "capi_no_such_checkpoint"), ACCEL_ERR_NOT_FOUND,
                "capi_no_such_checkpoint");
    CHECK_FAILS(accel_accelerator_save_state(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "output_dir");
    CHECK_FAILS(accel_accelerator_save_state(acc, ""), ACCEL_ERR_INVALID_ARGUMENT, "output_dir");
    accel_accelerator_free(acc);
}

static void test_call_order(void)
{
    accel_accelerator_t *acc = make_acc(NULL), *other = make_acc(NULL);
    accel_model_t *m = make_model("{\"type\": \"mlp\", \"widths\": [3, 2]}");
    accel_model_t *m2 = make_model("{\"type\": \"mlp\", \"widths\": [3, 2]}");
    accel_optimizer_t *opt = make_sgd(m, 0.1), *opt2 = make_sgd(m2, 0.1);
    accel_scheduler_t *s = NULL, *s2 = NULL;
    accel_dataloader_t *dl = make_loader(4, 3, 2, "{\"batch_size\": 2}");
    accel_batch_t *batch = NULL;
    double loss = -1.0;

    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"constant\"}", &s));
    CHECK_OK(accel_scheduler_create(opt2, "{\"type\": \"constant\"}", &s2));

    /* accumulate_end without begin; nested begin. */
    CHECK_FAILS(accel_accelerator_accumulate_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end");
    CHECK_OK(accel_accelerator_accumulate_begin(acc, NULL));
    CHECK_FAILS(accel_accelerator_accumulate_begin(acc, NULL), ACCEL_ERR_FAILED_PRECONDITION, "accumulate");
    CHECK_OK(accel_accelerator_accumulate_end(acc));
    CHECK_FAILS(accel_accelerator_accumulate_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end");
    /* accumulate with a model this accelerator did not prepare. */
    CHECK_FAILS(accel_accelerator_accumulate_begin(acc, m), ACCEL_ERR_FAILED_PRECONDITION, "model");
    CHECK_FAILS(accel_accelerator_accumulate_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end");

    /* The scheduler before its optimizer. */
    CHECK_FAILS(accel_accelerator_prepare_scheduler(acc, s), ACCEL_ERR_FAILED_PRECONDITION, "optimizer");
    CHECK_FAILS(accel_accelerator_prepare(acc, NULL, NULL, NULL, s), ACCEL_ERR_FAILED_PRECONDITION, "optimizer");

    /* train_step with unprepared objects. */
    CHECK_OK(accel_dataloader_next(dl, &batch));
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, batch, "mse", &loss), ACCEL_ERR_FAILED_PRECONDITION,
                "model");
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, batch, "mse", &loss), ACCEL_ERR_FAILED_PRECONDITION,
                "optimizer");
    CHECK_OK(accel_accelerator_prepare_optimizer(acc, opt));
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, s, batch, "mse", &loss), ACCEL_ERR_FAILED_PRECONDITION,
                "scheduler");
    /* Unknown and NULL loss names. */
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, batch, "hinge", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "loss_name");
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, batch, "hinge", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "hinge");
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, batch, NULL, &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "loss_name");
    /* Wrong loss for the labels: float labels for cross_entropy. */
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, batch, "cross_entropy", &loss),
                ACCEL_ERR_INVALID_ARGUMENT, "targets");
    /* NULL arguments. */
    CHECK_FAILS(accel_accelerator_train_step(acc, NULL, opt, NULL, batch, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "model");
    CHECK_FAILS(accel_accelerator_train_step(acc, m, NULL, NULL, batch, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "optimizer");
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, NULL, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "batch");
    CHECK_FAILS(accel_accelerator_train_step(NULL, m, opt, NULL, batch, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "accelerator");
    /* A failed train_step leaves no accumulate() open. */
    CHECK_FAILS(accel_accelerator_accumulate_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end");
    CHECK_OK(accel_accelerator_prepare_scheduler(acc, s));
    CHECK_OK(accel_accelerator_train_step(acc, m, opt, s, batch, "mse", &loss));
    CHECK(loss >= 0.0);
    CHECK_OK(accel_accelerator_train_step(acc, m, opt, s, batch, "mse", NULL));
    /* An optimizer over another model, a scheduler over another optimizer. */
    CHECK_OK(accel_accelerator_prepare(acc, m2, opt2, NULL, s2));
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt2, NULL, batch, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "optimizer");
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, s2, batch, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "scheduler");

    /* Preparing twice with the same accelerator is a no-op; with another one it fails. */
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_accelerator_prepare_optimizer(acc, opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, s));
    CHECK_FAILS(accel_accelerator_prepare_model(other, m), ACCEL_ERR_FAILED_PRECONDITION, "model");
    CHECK_FAILS(accel_accelerator_prepare_optimizer(other, opt), ACCEL_ERR_FAILED_PRECONDITION, "optimizer");
    CHECK_FAILS(accel_accelerator_prepare_scheduler(other, s), ACCEL_ERR_FAILED_PRECONDITION, "scheduler");
    CHECK_FAILS(accel_accelerator_prepare(other, m, NULL, NULL, NULL), ACCEL_ERR_FAILED_PRECONDITION, "model");
    CHECK_FAILS(accel_accelerator_prepare(other, NULL, opt, NULL, NULL), ACCEL_ERR_FAILED_PRECONDITION, "optimizer");
    CHECK_FAILS(accel_accelerator_train_step(other, m, opt, NULL, batch, "mse", &loss),
                ACCEL_ERR_FAILED_PRECONDITION, "model");
    CHECK_FAILS(accel_accelerator_accumulate_begin(other, m), ACCEL_ERR_FAILED_PRECONDITION, "model");
    {
        accel_model_t *u = (accel_model_t *)&u;
        CHECK_FAILS(accel_accelerator_unwrap_model(other, m, &u), ACCEL_ERR_FAILED_PRECONDITION, "model");
        CHECK(u == NULL);
    }
    /* dl is in the middle of a pass (the batch above): it cannot be prepared now. */
    CHECK_FAILS(accel_accelerator_prepare_dataloader(acc, dl), ACCEL_ERR_FAILED_PRECONDITION, "dataloader");
    {
        accel_dataloader_t *dl2 = make_loader(4, 3, 2, "{\"batch_size\": 2}");
        CHECK_OK(accel_accelerator_prepare_dataloader(acc, dl2));
        CHECK_OK(accel_accelerator_prepare_dataloader(acc, dl2));
        CHECK_FAILS(accel_accelerator_prepare_dataloader(other, dl2), ACCEL_ERR_FAILED_PRECONDITION, "dataloader");
        CHECK_FAILS(accel_accelerator_prepare(other, NULL, NULL, dl2, NULL), ACCEL_ERR_FAILED_PRECONDITION,
                    "dataloader");
        accel_dataloader_free(dl2);
    }
    /* A failed prepare() leaves nothing half-prepared: the fresh model in the same call stays unbound. */
    {
        accel_model_t *fresh = make_model("{\"type\": \"mlp\", \"widths\": [3, 2]}");
        CHECK_FAILS(accel_accelerator_prepare(other, fresh, opt, NULL, NULL), ACCEL_ERR_FAILED_PRECONDITION,
                    "optimizer");
        CHECK_OK(accel_accelerator_prepare_model(acc, fresh));
        accel_model_free(fresh);
    }
    /* An optimizer whose model another accelerator prepared. */
    {
        accel_model_t *m3 = make_model("{\"type\": \"mlp\", \"widths\": [3, 2]}");
        accel_optimizer_t *o3 = make_sgd(m3, 0.1);
        CHECK_OK(accel_accelerator_prepare_model(other, m3));
        CHECK_FAILS(accel_accelerator_prepare_optimizer(acc, o3), ACCEL_ERR_FAILED_PRECONDITION, "model");
        accel_optimizer_free(o3);
        accel_model_free(m3);
    }

    accel_batch_free(batch);
    accel_scheduler_free(s);
    accel_scheduler_free(s2);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_optimizer_free(opt2);
    accel_model_free(m);
    accel_model_free(m2);
    accel_accelerator_free(acc);
    accel_accelerator_free(other);
}

static void test_backward(void)
{
    accel_accelerator_t *acc = make_acc("{\"gradient_accumulation_steps\": 2}");
    accel_model_t *m = make_model("{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", "
                                  "\"in_features\": 2, \"out_features\": 1, \"bias\": false}]}");
    float w[2] = {1.0f, 1.0f}, x[2] = {3.0f, 4.0f}, zero[1] = {0.0f}, g[2] = {0, 0};
    int64_t s12[2] = {1, 2};
    accel_tensor_t *tw = tensor_f32(w, s12, 2), *in = matrix_f32(x, 1, 2), *y = matrix_f32(zero, 1, 1);
    accel_tensor_t *out = NULL, *loss = NULL, *grad = NULL, *plain = NULL;
    const char *key = "0.weight";

    CHECK_OK(accel_model_load_state_dict(m, &key, (const accel_tensor_t *const *)&tw, 1, true));
    CHECK_OK(accel_accelerator_prepare_model(acc, m));

    /* A tensor that does not require grad. */
    {
        float v = 2.0f;
        CHECK_OK(accel_tensor_create(&v, sizeof v, ACCEL_DTYPE_FLOAT32, NULL, 0, &plain));
        CHECK_FAILS(accel_accelerator_backward(acc, plain), ACCEL_ERR_INVALID_ARGUMENT, "loss");
        CHECK_FAILS(accel_accelerator_backward(acc, plain), ACCEL_ERR_INVALID_ARGUMENT, "grad");
        accel_tensor_free(plain);
        /* A loss computed from plain tensors does not either. */
        CHECK_OK(accel_loss_compute("mse", in, in, &plain));
        CHECK_FAILS(accel_accelerator_backward(acc, plain), ACCEL_ERR_INVALID_ARGUMENT, "loss");
        accel_tensor_free(plain);
    }
    /* A non-scalar. */
    CHECK_OK(accel_model_forward(m, in, &out));
    {
        accel_tensor_t *o2 = NULL;
        float xx[4] = {1, 2, 3, 4};
        accel_tensor_t *in2 = matrix_f32(xx, 2, 2);
        CHECK_OK(accel_model_forward(m, in2, &o2));
        CHECK_FAILS(accel_accelerator_backward(acc, o2), ACCEL_ERR_INVALID_ARGUMENT, "loss");
        accel_tensor_free(o2);
        accel_tensor_free(in2);
    }

    /* loss = (3 + 4 - 0)^2 = 49; dL/dw = 2 * 7 * x = (42, 56); backward divides by 2 (accumulation steps). */
    CHECK_OK(accel_loss_compute("mse", out, y, &loss));
    {
        double v = 0.0;
        CHECK_OK(accel_tensor_get_item(loss, &v));
        CHECK_NEAR(v, 49.0, 1e-5);
    }
    CHECK_OK(accel_accelerator_backward(acc, loss));
    /* A second backward through the same graph: a call-order mistake. */
    CHECK_FAILS(accel_accelerator_backward(acc, loss), ACCEL_ERR_FAILED_PRECONDITION, "loss");
    CHECK_OK(accel_model_get_gradient(m, key, &grad));
    if (grad != NULL && read_f32(grad, g, 2) == 0) {
        CHECK_NEAR(g[0], 21.0, 1e-4);
        CHECK_NEAR(g[1], 28.0, 1e-4);
    }
    accel_tensor_free(grad);
    grad = NULL;

    /* Clipping: the total 2-norm of (21, 28) is 35; the inf-norm 28. */
    {
        double norm = 0.0;
        CHECK_OK(accel_accelerator_clip_grad_norm(acc, m, 100.0, 2.0, &norm));
        CHECK_NEAR(norm, 35.0, 1e-4);
        CHECK_OK(accel_accelerator_clip_grad_norm(acc, m, 100.0, INFINITY, &norm));
        CHECK_NEAR(norm, 28.0, 1e-4);
        CHECK_OK(accel_accelerator_clip_grad_norm(acc, m, 7.0, 2.0, &norm));
        CHECK_NEAR(norm, 35.0, 1e-4);
        CHECK_OK(accel_model_get_gradient(m, key, &grad));
        if (grad != NULL && read_f32(grad, g, 2) == 0) {
            CHECK_NEAR(g[0], 4.2, 1e-4);
            CHECK_NEAR(g[1], 5.6, 1e-4);
        }
        accel_tensor_free(grad);
        grad = NULL;
        CHECK_OK(accel_accelerator_clip_grad_value(acc, m, 5.0));
        CHECK_OK(accel_model_get_gradient(m, key, &grad));
        if (grad != NULL && read_f32(grad, g, 2) == 0) {
            CHECK_NEAR(g[0], 4.2, 1e-4);
            CHECK_NEAR(g[1], 5.0, 1e-6);
        }
        accel_tensor_free(grad);
        CHECK_OK(accel_accelerator_clip_grad_norm(acc, m, 1.0, 2.0, NULL)); /* out may be NULL */
        CHECK_FAILS(accel_accelerator_clip_grad_norm(acc, m, -1.0, 2.0, &norm), ACCEL_ERR_INVALID_ARGUMENT,
                    "max_norm");
        CHECK_FAILS(accel_accelerator_clip_grad_norm(acc, m, NAN, 2.0, &norm), ACCEL_ERR_INVALID_ARGUMENT,
                    "max_norm");
        CHECK_FAILS(accel_accelerator_clip_grad_norm(acc, m, 1.0, 0.0, &norm), ACCEL_ERR_INVALID_ARGUMENT,
                    "norm_type");
        CHECK_FAILS(accel_accelerator_clip_grad_value(acc, m, -1.0), ACCEL_ERR_INVALID_ARGUMENT, "clip_value");
        CHECK_FAILS(accel_accelerator_clip_grad_value(acc, m, NAN), ACCEL_ERR_INVALID_ARGUMENT, "clip_value");
    }

    accel_tensor_free(loss);
    accel_tensor_free(out);
    accel_tensor_free(tw);
    accel_tensor_free(in);
    accel_tensor_free(y);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* train_step on a hand-computable model: SGD lr 0.1, w = (1, 1), x = (3, 4), y = 0. */
static void test_train_step_values(void)
{
    accel_accelerator_t *acc = make_acc(NULL);
    accel_model_t *m = make_model("{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", "
                                  "\"in_features\": 2, \"out_features\": 1, \"bias\": false}]}");
    float w[2] = {1.0f, 1.0f}, x[2] = {3.0f, 4.0f}, zero[1] = {0.0f}, after[2];
    int64_t s12[2] = {1, 2};
    accel_tensor_t *tw = tensor_f32(w, s12, 2), *tx = matrix_f32(x, 1, 2), *ty = matrix_f32(zero, 1, 1);
    accel_dataloader_t *dl = NULL;
    accel_batch_t *batch = NULL;
    accel_optimizer_t *opt;
    const char *key = "0.weight";
    double loss = 0.0;
    size_t n = 0;
    float *got;

    CHECK_OK(accel_model_load_state_dict(m, &key, (const accel_tensor_t *const *)&tw, 1, true));
    opt = make_sgd(m, 0.1);
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 1}", &dl));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));
    CHECK_OK(accel_dataloader_next(dl, &batch));
    CHECK_OK(accel_accelerator_train_step(acc, m, opt, NULL, batch, "mse", &loss));
    CHECK_NEAR(loss, 49.0, 1e-5);
    /* w - 0.1 * (42, 56) = (-3.2, -4.6); zero_grad left no gradient. */
    got = model_tensor_f32(m, key, &n);
    if (got != NULL && n == 2) memcpy(after, got, sizeof after);
    free(got);
    CHECK_NEAR(after[0], -3.2, 1e-5);
    CHECK_NEAR(after[1], -4.6, 1e-5);
    {
        accel_tensor_t *g = (accel_tensor_t *)&g;
        CHECK_OK(accel_model_get_gradient(m, key, &g));
        CHECK(g == NULL);
    }
    /* A batch whose inputs the model cannot take: an argument error, and no accumulate() left open. */
    {
        float wide[3] = {1, 2, 3};
        accel_tensor_t *tw3 = matrix_f32(wide, 1, 3);
        accel_dataloader_t *wdl = NULL;
        accel_batch_t *wb = NULL;
        CHECK_OK(accel_dataloader_create_from_tensors(tw3, ty, "{}", &wdl));
        CHECK_OK(accel_dataloader_next(wdl, &wb));
        CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, wb, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                    "batch");
        CHECK_FAILS(accel_accelerator_accumulate_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "accumulate_end");
        accel_batch_free(wb);
        accel_dataloader_free(wdl);
        accel_tensor_free(tw3);
    }
    /* A batch without labels. */
    {
        accel_dataloader_t *nolab = NULL;
        accel_batch_t *b2 = NULL;
        CHECK_OK(accel_dataloader_create_from_tensors(tx, NULL, "{}", &nolab));
        CHECK_OK(accel_dataloader_next(nolab, &b2));
        CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, b2, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                    "targets");
        accel_batch_free(b2);
        accel_dataloader_free(nolab);
    }
    /* An unwrapped model is not accepted by train_step, but runs forward. */
    {
        accel_model_t *u = NULL;
        accel_tensor_t *o = NULL;
        accel_dtype_t dt = -1;
        CHECK_OK(accel_accelerator_unwrap_model(acc, m, &u));
        CHECK(u != NULL);
        CHECK_FAILS(accel_accelerator_train_step(acc, u, opt, NULL, batch, "mse", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                    "model");
        CHECK_OK(accel_model_forward(u, tx, &o));
        CHECK_OK(accel_tensor_get_dtype(o, &dt));
        CHECK(dt == ACCEL_DTYPE_FLOAT32);
        accel_tensor_free(o);
        accel_model_free(u); /* the prepared handle stays valid */
        CHECK_OK(accel_model_forward(m, tx, &o));
        accel_tensor_free(o);
    }
    accel_batch_free(batch);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(tw);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    accel_accelerator_free(acc);
}

/* bf16: a prepared model runs under autocast and still returns float32. */
static void test_bf16_forward(void)
{
    accel_accelerator_t *acc = make_acc("{\"mixed_precision\": \"bf16\"}");
    accel_model_t *m = make_model("{\"type\": \"mlp\", \"widths\": [4, 8, 2]}");
    float x[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    accel_tensor_t *in = matrix_f32(x, 2, 4), *out = NULL;
    accel_dtype_t dt = -1;

    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK_OK(accel_tensor_get_dtype(out, &dt));
    CHECK(dt == ACCEL_DTYPE_FLOAT32);
    CHECK(shape2_is(out, 2, 2));
    accel_tensor_free(out);
    accel_tensor_free(in);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* Handles may be freed in any order: the accelerator first, then everything it prepared still works. */
static void test_free_order(void)
{
    /* No hidden layer: the output weights always get a gradient (a ReLU layer could be dead at random). */
    accel_accelerator_t *acc = make_acc("{\"gradient_accumulation_steps\": 1}");
    accel_model_t *m = make_model("{\"type\": \"mlp\", \"widths\": [3, 2]}");
    accel_optimizer_t *opt = make_sgd(m, 0.1);
    accel_scheduler_t *s = NULL;
    accel_dataloader_t *dl = make_loader(6, 3, 2, "{\"batch_size\": 2}");
    accel_batch_t *b = NULL;
    accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
    float before[2], *after;
    size_t n = 0;
    float *w;

    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"step\", \"step_size\": 1, \"gamma\": 0.5}", &s));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, s));
    accel_accelerator_free(acc);

    CHECK_OK(accel_dataloader_next(dl, &b));
    CHECK(b != NULL);
    CHECK_OK(accel_batch_get_inputs(b, &in));
    CHECK_OK(accel_batch_get_labels(b, &lab));
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK_OK(accel_loss_compute("mse", out, lab, &loss));
    w = model_tensor_f32(m, "0.bias", &n);
    if (w && n == 2) memcpy(before, w, sizeof before);
    free(w);
    {
        /* No accelerator handle for backward any more: a fresh one computes the gradients of this graph. */
        accel_accelerator_t *acc2 = make_acc(NULL);
        CHECK_OK(accel_accelerator_backward(acc2, loss));
        accel_accelerator_free(acc2);
    }
    CHECK_OK(accel_optimizer_step(opt));
    CHECK_OK(accel_scheduler_step(s));
    CHECK_OK(accel_optimizer_zero_grad(opt));
    after = model_tensor_f32(m, "0.bias", &n);
    CHECK(after != NULL && n == 2 && memcmp(after, before, sizeof before) != 0);
    free(after);
    {
        double lr = 0.0;
        CHECK_OK(accel_optimizer_get_lr(opt, &lr));
        CHECK_NEAR(lr, 0.05, 1e-12);
    }
    accel_batch_free(b);
    /* Finish the pass (the loader tells the freed accelerator's state about its last batch). */
    while (accel_dataloader_next(dl, &b) == ACCEL_OK && b != NULL) accel_batch_free(b);

    /* Free the rest in an unusual order too. */
    accel_model_free(m);
    CHECK_OK(accel_optimizer_step(opt));
    accel_optimizer_free(opt);
    CHECK_OK(accel_scheduler_step(s));
    accel_scheduler_free(s);
    accel_dataloader_free(dl);
    accel_tensor_free(in);
    accel_tensor_free(lab);
    accel_tensor_free(out);
    accel_tensor_free(loss);
}

static double loss_of(const char *name, accel_tensor_t *outputs, accel_tensor_t *targets)
{
    accel_tensor_t *l = NULL;
    double v = NAN;
    size_t ndim = 9;
    CHECK_OK(accel_loss_compute(name, outputs, targets, &l));
    if (l == NULL) return NAN;
    CHECK_OK(accel_tensor_get_ndim(l, &ndim));
    CHECK(ndim == 0);
    CHECK_OK(accel_tensor_get_item(l, &v));
    accel_tensor_free(l);
    return v;
}

static void test_losses(void)
{
    const double ln2 = 0.69314718055994531, ln3 = 1.0986122886681098;
    float o4[4] = {1, 2, 3, 4}, t4[4] = {1, 1, 1, 1};
    accel_tensor_t *out = matrix_f32(o4, 2, 2), *tgt = matrix_f32(t4, 2, 2);
    accel_tensor_t *l = (accel_tensor_t *)&l;

    /* Differences 0, 1, 2, 3. */
    CHECK_NEAR(loss_of("mse", out, tgt), (0.0 + 1 + 4 + 9) / 4, 1e-6);
    CHECK_NEAR(loss_of("l1", out, tgt), (0.0 + 1 + 2 + 3) / 4, 1e-6);
    /* smooth_l1 with beta 1: 0.5 d^2 below 1, |d| - 0.5 above. */
    CHECK_NEAR(loss_of("smooth_l1", out, tgt), (0.0 + 0.5 + 1.5 + 2.5) / 4, 1e-6);
    {
        /* float64 targets are converted to the outputs' dtype. */
        double t64[4] = {1, 1, 1, 1};
        int64_t s22[2] = {2, 2};
        accel_tensor_t *td = NULL;
        CHECK_OK(accel_tensor_create(t64, sizeof t64, ACCEL_DTYPE_FLOAT64, s22, 2, &td));
        CHECK_NEAR(loss_of("mse", out, td), 3.5, 1e-6);
        accel_tensor_free(td);
    }
    {
        /* bce_with_logits: x = (0, ln 3), y = (1, 0): (ln 2 + ln 4) / 2. */
        float x[2] = {0.0f, (float)ln3}, y[2] = {1.0f, 0.0f};
        accel_tensor_t *tx = matrix_f32(x, 1, 2), *ty = matrix_f32(y, 1, 2);
        CHECK_NEAR(loss_of("bce_with_logits", tx, ty), 1.5 * ln2, 1e-6);
        accel_tensor_free(tx);
        accel_tensor_free(ty);
    }
    {
        /* cross_entropy: logits (0, 0) class 0 -> ln 2; (ln 3, 0) class 1 -> -ln(1/4) = ln 4. */
        float logits[4] = {0.0f, 0.0f, (float)ln3, 0.0f};
        int64_t cls[2] = {0, 1}, s2[1] = {2};
        float fcls[2] = {0.0f, 1.0f};
        int32_t icls[2] = {0, 1};
        accel_tensor_t *tl = matrix_f32(logits, 2, 2), *tc = tensor_i64(cls, s2, 1), *tf = tensor_f32(fcls, s2, 1);
        accel_tensor_t *ti = NULL;
        CHECK_NEAR(loss_of("cross_entropy", tl, tc), 1.5 * ln2, 1e-6);
        /* Float targets: INVALID_ARGUMENT naming targets. */
        CHECK_FAILS(accel_loss_compute("cross_entropy", tl, tf, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
        CHECK(l == NULL);
        CHECK_OK(accel_tensor_create(icls, sizeof icls, ACCEL_DTYPE_INT32, s2, 1, &ti));
        CHECK_FAILS(accel_loss_compute("cross_entropy", tl, ti, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
        CHECK_FAILS(accel_loss_compute("nll", tl, tf, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
        /* Wrong shapes: [N, C] outputs against [N] targets. */
        {
            int64_t c3[3] = {0, 1, 0}, s3[1] = {3};
            accel_tensor_t *t3 = tensor_i64(c3, s3, 1);
            CHECK_FAILS(accel_loss_compute("cross_entropy", tl, t3, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
            CHECK_FAILS(accel_loss_compute("cross_entropy", tc, tc, &l), ACCEL_ERR_INVALID_ARGUMENT, "outputs");
            accel_tensor_free(t3);
        }
        /* A class index out of range is the caller's input, not a crash. */
        {
            int64_t badcls[2] = {0, 5};
            accel_tensor_t *tb = tensor_i64(badcls, s2, 1);
            CHECK_FAILS(accel_loss_compute("cross_entropy", tl, tb, &l), ACCEL_ERR_OUT_OF_RANGE, "Target 5");
            CHECK_FAILS(accel_loss_compute("nll", tl, tb, &l), ACCEL_ERR_OUT_OF_RANGE, "Target 5");
            accel_tensor_free(tb);
        }
        accel_tensor_free(tl);
        accel_tensor_free(tc);
        accel_tensor_free(tf);
        accel_tensor_free(ti);
    }
    {
        /* nll: log-probabilities, picks -(row0[1] + row1[0]) / 2 = (2 + 3) / 2. */
        float lp[4] = {-1.0f, -2.0f, -3.0f, -4.0f};
        int64_t cls[2] = {1, 0}, s2[1] = {2};
        accel_tensor_t *tl = matrix_f32(lp, 2, 2), *tc = tensor_i64(cls, s2, 1);
        CHECK_NEAR(loss_of("nll", tl, tc), 2.5, 1e-6);
        accel_tensor_free(tl);
        accel_tensor_free(tc);
    }
    /* Floating losses with bad targets. */
    {
        int64_t i4[4] = {1, 1, 1, 1};
        int64_t s22[2] = {2, 2};
        float f3[3] = {1, 1, 1};
        accel_tensor_t *ti = tensor_i64(i4, s22, 2), *t3 = matrix_f32(f3, 1, 3);
        CHECK_FAILS(accel_loss_compute("mse", out, ti, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
        CHECK_FAILS(accel_loss_compute("l1", out, t3, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
        CHECK_FAILS(accel_loss_compute("smooth_l1", out, t3, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
        CHECK_FAILS(accel_loss_compute("bce_with_logits", out, t3, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
        /* Integer outputs. */
        CHECK_FAILS(accel_loss_compute("mse", ti, ti, &l), ACCEL_ERR_INVALID_ARGUMENT, "outputs");
        accel_tensor_free(ti);
        accel_tensor_free(t3);
    }
    /* Names and NULLs. */
    CHECK_FAILS(accel_loss_compute("hinge", out, tgt, &l), ACCEL_ERR_INVALID_ARGUMENT, "loss_name");
    CHECK_FAILS(accel_loss_compute("MSE", out, tgt, &l), ACCEL_ERR_INVALID_ARGUMENT, "MSE");
    CHECK_FAILS(accel_loss_compute(NULL, out, tgt, &l), ACCEL_ERR_INVALID_ARGUMENT, "loss_name");
    CHECK_FAILS(accel_loss_compute("mse", NULL, tgt, &l), ACCEL_ERR_INVALID_ARGUMENT, "outputs");
    CHECK_FAILS(accel_loss_compute("mse", out, NULL, &l), ACCEL_ERR_INVALID_ARGUMENT, "targets");
    CHECK_FAILS(accel_loss_compute("mse", out, tgt, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK(l == NULL);

    accel_tensor_free(out);
    accel_tensor_free(tgt);
}

int main(void)
{
    test_create_and_config();
    test_bad_configs();
    test_getters_null();
    test_process_facts_and_print();
    test_call_order();
    test_backward();
    test_train_step_values();
    test_bf16_forward();
    test_free_order();
    test_losses();
    return capi_report("test_accelerator");
}
