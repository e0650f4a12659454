/* Sharded training through the C API in one process (the multi-process equivalence with DDP is in
 * tests/distributed): every strategy trains to the weights of plain training, sharded parameters are
 * readable only between summon_full_params_begin/end, memory statistics, and bad configurations named. */
#define _POSIX_C_SOURCE 200809L
#include "capi_helpers.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 64
#define NIN 6
#define NOUT 3
#define NPARAMS (NIN * 16 + 16 + 16 * 16 + 16 + 16 * NOUT + NOUT)

static const char *kSpec = "{\"type\": \"mlp\", \"widths\": [6, 16, 16, 3], \"activation\": \"tanh\"}";

/* Trains 6 optimizer steps (accumulation 2, batch 8, AdamW, clipping at 0.5) under `config`; writes the
 * final weights (parameter order) to `w`. With free_at > 0, after that many steps free_memory() releases
 * everything and the same objects are prepared again (the optimizer keeps its state). */
static void train_freeing(const char *config, float *w, int free_at)
{
    float x[N * NIN], y[N * NOUT];
    int i;
    for (i = 0; i < N * NIN; ++i) x[i] = (float)sin(0.37 * (double)i);
    for (i = 0; i < N * NOUT; ++i) y[i] = (float)cos(0.21 * (double)i);
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *tx = matrix_f32(x, N, NIN), *ty = matrix_f32(y, N, NOUT);
    CHECK_OK(accel_random_set_seed(3, false, false));
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 8, \"shuffle\": false}", &dl));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));
    int steps = 0;
    while (steps < 6) {
        accel_batch_t *b = NULL;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) continue;
        accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
        bool sync = false;
        CHECK_OK(accel_accelerator_accumulate_begin(acc, m));
        CHECK_OK(accel_batch_get_inputs(b, &in));
        CHECK_OK(accel_batch_get_labels(b, &lab));
        CHECK_OK(accel_model_forward(m, in, &out));
        CHECK_OK(accel_loss_compute("mse", out, lab, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_accelerator_get_sync_gradients(acc, &sync));
        if (sync) {
            double norm = 0.0;
            CHECK_OK(accel_accelerator_clip_grad_norm(acc, m, 0.5, 2.0, &norm));
            CHECK(norm > 0.0);
            ++steps;
        }
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        CHECK_OK(accel_accelerator_accumulate_end(acc));
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_tensor_free(out);
        accel_tensor_free(loss);
        accel_batch_free(b);
        if (sync && steps == free_at) {
            int64_t step = -1;
            CHECK_OK(accel_accelerator_free_memory(acc));
            CHECK_OK(accel_accelerator_get_step(acc, &step));
            CHECK(step == 0);
            CHECK_OK(accel_model_get_tensor(m, "0.weight", &out)); /* whole again, without summon */
            accel_tensor_free(out);
            CHECK_OK(accel_accelerator_clear(acc)); /* nothing left to release */
            CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));
        }
    }
    const int sharded = strstr(config, "_plugin") != NULL;
    if (sharded) CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    CHECK(read_params_f32(m, w, NPARAMS) == NPARAMS);
    if (sharded) CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    accel_accelerator_free(acc);
}

static void train(const char *config, float *w) { train_freeing(config, w, 0); }

/* free_memory after 3 of 6 steps, then the same objects prepared again: the same weights, bit for bit (the
 * optimizer's state goes through the unsharded layout and back into the shards). */
static void test_free_memory_and_prepare_again(void)
{
    const char *configs[] = {
        "{\"gradient_accumulation_steps\": 2}",
        "{\"gradient_accumulation_steps\": 2, \"fsdp_plugin\": {}}",
        "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 1}}",
        "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5}}",
        /* 16-bit parameters: the optimizer's state must not pass through them (it was rounded to bfloat16). */
        "{\"mixed_precision\": \"bf16\", \"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5}}",
        "{\"mixed_precision\": \"bf16\", \"gradient_accumulation_steps\": 2, \"fsdp_plugin\": {}}",
    };
    float ref[NPARAMS], got[NPARAMS];
    size_t c;
    for (c = 0; c < sizeof configs / sizeof configs[0]; ++c) {
        train(configs[c], ref);
        train_freeing(configs[c], got, 3);
        if (memcmp(ref, got, sizeof ref) != 0) fprintf(stderr, "free_memory changed training under %s\n", configs[c]);
        CHECK(memcmp(ref, got, sizeof ref) == 0);
    }
    /* Released objects can go to another accelerator; before, they cannot. */
    accel_accelerator_t *a = NULL, *b = NULL;
    accel_model_t *m = NULL;
    CHECK_OK(accel_accelerator_create("{\"deepspeed_plugin\": {\"zero_stage\": 3}}", &a));
    CHECK_OK(accel_accelerator_create(NULL, &b));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_accelerator_prepare_model(a, m));
    CHECK_FAILS(accel_accelerator_prepare_model(b, m), ACCEL_ERR_FAILED_PRECONDITION, "another accelerator");
    CHECK_OK(accel_accelerator_summon_full_params_begin(a, m));
    CHECK_FAILS(accel_accelerator_free_memory(a), ACCEL_ERR_FAILED_PRECONDITION, "summon");
    CHECK_OK(accel_accelerator_summon_full_params_end(a, m));
    CHECK_OK(accel_accelerator_autocast_begin(a));
    CHECK_FAILS(accel_accelerator_free_memory(a), ACCEL_ERR_FAILED_PRECONDITION, "autocast");
    CHECK_OK(accel_accelerator_autocast_end(a));
    CHECK_OK(accel_accelerator_free_memory(a));
    CHECK_OK(accel_accelerator_prepare_model(b, m));
    CHECK_FAILS(accel_accelerator_free_memory(NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_clear(NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    accel_model_free(m);
    accel_accelerator_free(a);
    accel_accelerator_free(b);
}

static void test_strategies_match_plain_training(void)
{
    static const char *configs[] = {
        "{\"gradient_accumulation_steps\": 2, \"fsdp_plugin\": {}}",
        "{\"gradient_accumulation_steps\": 2, \"fsdp_plugin\": {\"sharding_strategy\": \"SHARD_GRAD_OP\"}}",
        "{\"gradient_accumulation_steps\": 2, \"fsdp_plugin\": {\"sharding_strategy\": \"NO_SHARD\"}}",
        "{\"gradient_accumulation_steps\": 2, \"fsdp_plugin\": {\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\", "
        "\"transformer_cls_names_to_wrap\": [\"linear\"]}}",
        "{\"gradient_accumulation_steps\": 2, \"fsdp_plugin\": {\"fsdp_version\": 2, \"auto_wrap_policy\": "
        "\"SIZE_BASED_WRAP\", \"min_num_params\": 100}}",
        "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 0, \"gradient_clipping\": 0.5}}",
        "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 1, \"gradient_clipping\": 0.5}}",
        "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 2, \"gradient_clipping\": 0.5}}",
        "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5}}",
    };
    float ref[NPARAMS], got[NPARAMS];
    size_t c;
    int i;
    train("{\"gradient_accumulation_steps\": 2}", ref);
    for (c = 0; c < sizeof configs / sizeof configs[0]; ++c) {
        memset(got, 0, sizeof got);
        train(configs[c], got);
        double worst = 0.0;
        for (i = 0; i < NPARAMS; ++i) {
            double d = fabs((double)ref[i] - (double)got[i]) / fmax(1.0, fabs((double)ref[i]));
            if (d > worst) worst = d;
        }
        if (worst > 1e-6) fprintf(stderr, "%s: worst relative difference %g\n", configs[c], worst);
        CHECK(worst <= 1e-6);
    }
}

static void test_summon_memory_and_errors(void)
{
    accel_accelerator_t *acc = NULL, *plain = NULL;
    accel_model_t *m = NULL, *m2 = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *t = NULL;
    char *json = NULL;
    CHECK_OK(accel_accelerator_create("{\"deepspeed_plugin\": {\"zero_stage\": 3}}", &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adam\", \"lr\": 0.01}", &opt));
    CHECK_FAILS(accel_accelerator_summon_full_params_begin(acc, m), ACCEL_ERR_FAILED_PRECONDITION, "not prepared");
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    /* At rest a ZeRO-3 model holds only shards: reading or writing it needs summon_full_params. */
    CHECK_FAILS(accel_model_get_tensor(m, "0.weight", &t), ACCEL_ERR_FAILED_PRECONDITION, "summon_full_params");
    CHECK_FAILS(accel_accelerator_summon_full_params_end(acc, m), ACCEL_ERR_FAILED_PRECONDITION, "no matching");
    CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    CHECK_FAILS(accel_accelerator_summon_full_params_begin(acc, m), ACCEL_ERR_FAILED_PRECONDITION, "already");
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &t));
    accel_tensor_free(t);
    t = NULL;
    CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    CHECK_FAILS(accel_accelerator_summon_full_params_begin(NULL, m), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_summon_full_params_begin(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "model");
    /* Checkpoints gather the whole weights for the save and shard them again after: the files hold every
     * weight (the one read back equals the summoned one), and the model is sharded again. */
    {
        accel_model_t *copy = NULL;
        accel_tensor_t *a = NULL, *b = NULL;
        float va[96], vb[96];
        CHECK_OK(accel_accelerator_save_state(acc, "sharded_ckpt"));
        CHECK_FAILS(accel_model_get_tensor(m, "0.weight", &t), ACCEL_ERR_FAILED_PRECONDITION, "summon_full_params");
        CHECK_OK(accel_accelerator_save_model(acc, m, "sharded_model", NULL));
        CHECK_FAILS(accel_model_get_tensor(m, "0.weight", &t), ACCEL_ERR_FAILED_PRECONDITION, "summon_full_params");
        CHECK_OK(accel_model_create_from_json(kSpec, &copy));
        CHECK_OK(accel_model_load_checkpoint(copy, "sharded_model", NULL));
        CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
        CHECK_OK(accel_model_get_tensor(m, "0.weight", &a));
        CHECK_OK(accel_model_get_tensor(copy, "0.weight", &b));
        CHECK_OK(accel_tensor_copy_to_buffer(a, va, sizeof va));
        CHECK_OK(accel_tensor_copy_to_buffer(b, vb, sizeof vb));
        CHECK(memcmp(va, vb, sizeof va) == 0);
        /* Past max_shard_size the gathered weights are split into shards with an index, which load back. */
        {
            accel_model_t *copy2 = NULL;
            accel_tensor_t *c = NULL;
            float vc[96];
            FILE *index = NULL;
            CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
            CHECK_OK(accel_accelerator_save_model(acc, m, "sharded_model_split", "{\"max_shard_size\": 200}"));
            CHECK((index = fopen("sharded_model_split/model.safetensors.index.json", "r")) != NULL);
            if (index != NULL) fclose(index);
            CHECK_OK(accel_model_create_from_json(kSpec, &copy2));
            CHECK_OK(accel_model_load_checkpoint(copy2, "sharded_model_split", NULL));
            CHECK_OK(accel_model_get_tensor(copy2, "0.weight", &c));
            CHECK_OK(accel_tensor_copy_to_buffer(c, vc, sizeof vc));
            CHECK(memcmp(va, vc, sizeof va) == 0);
            accel_tensor_free(c);
            accel_model_free(copy2);
            CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
        }
        /* Summoned by the user: a save leaves it summoned. */
        CHECK_OK(accel_accelerator_save_state(acc, "sharded_ckpt"));
        CHECK_FAILS(accel_accelerator_summon_full_params_begin(acc, m), ACCEL_ERR_FAILED_PRECONDITION, "already");
        CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
        CHECK_OK(accel_accelerator_load_state(acc, "sharded_ckpt"));
        CHECK_FAILS(accel_model_get_tensor(m, "0.weight", &t), ACCEL_ERR_FAILED_PRECONDITION, "summon_full_params");
        accel_tensor_free(a);
        accel_tensor_free(b);
        accel_model_free(copy);
    }

    CHECK_OK(accel_accelerator_get_memory_stats_json(acc, &json));
    CHECK(strstr(json, "\"strategy\": \"ZERO_3\"") != NULL);
    CHECK(strstr(json, "\"parameter_bytes\": ") != NULL);
    CHECK(strstr(json, "\"optimizer_state_bytes\": 0") != NULL); /* no step yet */
    CHECK(strstr(json, "\"peak_rss_bytes\": ") != NULL);
    accel_string_free(json);
    json = NULL;
    CHECK_FAILS(accel_accelerator_get_memory_stats_json(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_memory_stats_json(NULL, &json), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");

    /* Not sharded: summon is refused, memory statistics still work. */
    CHECK_OK(accel_accelerator_create(NULL, &plain));
    CHECK_OK(accel_model_create_from_json(kSpec, &m2));
    CHECK_OK(accel_accelerator_prepare_model(plain, m2));
    CHECK_FAILS(accel_accelerator_summon_full_params_begin(plain, m2), ACCEL_ERR_FAILED_PRECONDITION, "not sharded");
    CHECK_OK(accel_accelerator_get_memory_stats_json(plain, &json));
    CHECK(strstr(json, "\"strategy\": \"NONE\"") != NULL);
    CHECK(strstr(json, "\"parameter_bytes\": 1740") != NULL); /* (96+16+256+16+48+3) floats */
    accel_string_free(json);
    accel_model_free(m2);
    accel_accelerator_free(plain);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* deepspeed_plugin + fp16: DeepSpeed's loss scaler (2^initial_scale_power, doubling every loss_scale_window
 * clean steps), not PyTorch's (growth_interval 2000). fp32 maths on this CPU (autocast off), so no overflow. */
static void test_deepspeed_fp16_scaler(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    float x[8 * NIN], y[8 * NOUT];
    int i;
    for (i = 0; i < 8 * NIN; ++i) x[i] = (float)sin(0.3 * (double)i);
    for (i = 0; i < 8 * NOUT; ++i) y[i] = (float)cos(0.2 * (double)i);
    accel_tensor_t *tx = matrix_f32(x, 8, NIN), *ty = matrix_f32(y, 8, NOUT);
    CHECK_OK(accel_accelerator_create("{\"mixed_precision\": \"fp16\", \"kwargs_handlers\": {\"autocast\": {\"enabled\": "
                                      "false}}, \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": "
                                      "{\"stage\": 2}, \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, "
                                      "\"loss_scale_window\": 2}}}}",
                                      &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    double scale = 0.0;
    CHECK_OK(accel_accelerator_get_grad_scale(acc, &scale));
    CHECK(scale == 256.0);
    const double expected[4] = {256.0, 512.0, 512.0, 1024.0}; /* doubled when (iter + 1) % 2 == 0 */
    for (i = 0; i < 4; ++i) {
        accel_tensor_t *out = NULL, *loss = NULL;
        CHECK_OK(accel_model_forward(m, tx, &out));
        CHECK_OK(accel_loss_compute("mse", out, ty, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        CHECK_OK(accel_accelerator_get_grad_scale(acc, &scale));
        if (scale != expected[i]) fprintf(stderr, "step %d: scale %g, expected %g\n", i, scale, expected[i]);
        CHECK(scale == expected[i]);
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    accel_accelerator_free(acc);
}

/* hf_ds_config with train_micro_batch_size_per_gpu "auto": prepare fills it from the loader (Accelerate) and
 * DeepSpeed's triangle must hold; a loader that breaks it is refused before anything is prepared. */
static void test_deepspeed_auto_micro_batch(void)
{
    const char *config = "{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 1}, "
                         "\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": \"auto\", "
                         "\"gradient_accumulation_steps\": 2}}}";
    float x[16 * NIN] = {0}, y[16 * NOUT] = {0};
    accel_tensor_t *tx = matrix_f32(x, 16, NIN), *ty = matrix_f32(y, 16, NOUT);
    accel_accelerator_t *acc = NULL, *other = NULL;
    accel_model_t *m = NULL;
    accel_dataloader_t *good = NULL, *bad = NULL;
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_accelerator_create(NULL, &other));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 4}", &bad));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 8}", &good));
    CHECK_FAILS(accel_accelerator_prepare(acc, m, NULL, bad, NULL), ACCEL_ERR_INVALID_ARGUMENT,
                "hf_ds_config.train_batch_size: 16 is not the data loader's batch size per process (4");
    CHECK_OK(accel_accelerator_prepare_model(other, m)); /* the failed call prepared nothing */
    CHECK_OK(accel_accelerator_prepare(acc, NULL, NULL, good, NULL));
    accel_dataloader_free(good);
    accel_dataloader_free(bad);
    accel_model_free(m);
    accel_accelerator_free(acc);
    accel_accelerator_free(other);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
}

/* Runs prepare with `loader` while stderr goes to a file; returns what was written (static buffer). */
static const char *prepare_loader_stderr(accel_accelerator_t *acc, accel_dataloader_t *loader)
{
    static char text[4096];
    char path[] = "/tmp/accel_stderr_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    CHECK_OK(accel_accelerator_prepare(acc, NULL, NULL, loader, NULL));
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return text;
}

/* A numeric train_micro_batch_size_per_gpu unlike the loader's batch per process: the loader's batch is what
 * trains (as under Accelerate), so the user is told once, on the main process; an equal one says nothing. */
static void test_deepspeed_fixed_micro_batch_warns(void)
{
    const char *config = "{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 1}, "
                         "\"train_micro_batch_size_per_gpu\": 8}}}";
    float x[16 * NIN] = {0}, y[16 * NOUT] = {0};
    accel_tensor_t *tx = matrix_f32(x, 16, NIN), *ty = matrix_f32(y, 16, NOUT);
    accel_accelerator_t *acc = NULL;
    accel_dataloader_t *same = NULL, *other = NULL;
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 8}", &same));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 4}", &other));
    CHECK(strstr(prepare_loader_stderr(acc, same), "train_micro_batch_size_per_gpu") == NULL);
    const char *said = prepare_loader_stderr(acc, other);
    CHECK(strstr(said, "train_micro_batch_size_per_gpu is 8 but this data loader gives each process 4") != NULL);
    if (strstr(said, "is 8 but") == NULL) fprintf(stderr, "stderr was: %s\n", said);
    accel_dataloader_free(same);
    accel_dataloader_free(other);
    accel_accelerator_free(acc);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
}

static void test_bad_wrap_class(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    CHECK_OK(accel_accelerator_create("{\"fsdp_plugin\": {\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\", "
                                      "\"transformer_cls_names_to_wrap\": [\"gpt_block\"]}}",
                                      &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_FAILS(accel_accelerator_prepare(acc, m, NULL, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT,
                "fsdp_plugin.transformer_cls_names_to_wrap: the model has no layer of type \"gpt_block\"");
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* Entries of `dir` whose name starts with `prefix` (-1: no such folder). */
static int entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (d == NULL) return -1;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) ++n;
    closedir(d);
    return n;
}

/* accel_optimizer_step with files limited to `bytes` (a full disk: writes past it fail with EFBIG). */
static accel_status_t step_with_file_limit(accel_optimizer_t *opt, rlim_t bytes)
{
    struct rlimit old, small;
    accel_status_t st;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = bytes;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    st = accel_optimizer_step(opt);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    return st;
}

/* Optimizer offload (ZeRO-Offload "cpu", ZeRO-Infinity "nvme"): bit for bit the weights of the same
 * strategy without it, through free_memory and preparing again; the state is out of memory between steps;
 * the offload folder goes with the accelerator; a path that is a file and a full disk are named errors. */
static void test_optimizer_offload(void)
{
    char base[256], config[1024], ref_config[512];
    float ref[NPARAMS], got[NPARAMS];
    snprintf(base, sizeof base, "/tmp/accel-offload-test-%d", (int)getpid());
    snprintf(ref_config, sizeof ref_config,
             "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 2, \"gradient_clipping\": 0.5}}");
    train_freeing(ref_config, ref, 3);
    snprintf(config, sizeof config,
             "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 2, \"gradient_clipping\": 0.5, "
             "\"offload_optimizer_device\": \"nvme\", \"offload_optimizer_nvme_path\": \"%s\"}}", base);
    train_freeing(config, got, 3);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 2, \"gradient_clipping\": 0.5, "
          "\"offload_optimizer_device\": \"cpu\"}}", got);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    CHECK(entries(base, "accel-optimizer-") == 0); /* the accelerator's folder went with it */

    /* One step: the state is in the file afterwards, none of it in memory. */
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    float xs[8 * NIN], ys[8 * NOUT];
    char *stats = NULL;
    int i;
    for (i = 0; i < 8 * NIN; ++i) xs[i] = (float)sin(0.1 * i);
    for (i = 0; i < 8 * NOUT; ++i) ys[i] = (float)cos(0.1 * i);
    x = matrix_f32(xs, 8, NIN);
    y = matrix_f32(ys, 8, NOUT);
    snprintf(config, sizeof config,
             "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_optimizer_device\": \"nvme\", "
             "\"offload_optimizer_nvme_path\": \"%s\"}}", base);
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    CHECK(entries(base, "accel-optimizer-rank0-") == 1);
    for (i = 0; i < 3; ++i) {
        accel_status_t st;
        CHECK_OK(accel_model_forward(m, x, &out));
        CHECK_OK(accel_loss_compute("mse", out, y, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        if (i == 1) {
            /* A full disk (files above 1 KiB cannot be written: EFBIG): the step fails naming the file, and
             * the state stays whole in memory, so the next step goes on from it. */
            st = step_with_file_limit(opt, 1024);
            CHECK(st == ACCEL_ERR_RESOURCE_EXHAUSTED);
            CHECK(strstr(accel_last_error_message(), "optimizer offload: cannot write") != NULL);
            CHECK(strstr(accel_last_error_message(), base) != NULL);
        } else {
            CHECK_OK(accel_optimizer_step(opt));
        }
        CHECK_OK(accel_optimizer_zero_grad(opt));
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    CHECK_OK(accel_accelerator_get_memory_stats_json(acc, &stats));
    printf("offload nvme: %s\n", stats);
    CHECK(strstr(stats, "\"optimizer_state_bytes\": 0,") != NULL);
    CHECK(strstr(stats, "\"offloaded_bytes\": 0,") == NULL);
    CHECK(strstr(stats, "\"peak_optimizer_state_bytes\": 0,") == NULL);
    accel_string_free(stats);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    CHECK(entries(base, "accel-optimizer-") == 0);

    /* A path that is a file: named at prepare time. */
    {
        char file[300];
        FILE *f;
        snprintf(file, sizeof file, "%s/not-a-folder", base);
        f = fopen(file, "w");
        CHECK(f != NULL);
        if (f) fclose(f);
        snprintf(config, sizeof config,
                 "{\"deepspeed_plugin\": {\"zero_stage\": 1, \"offload_optimizer_device\": \"nvme\", "
                 "\"offload_optimizer_nvme_path\": \"%s\"}}", file);
        CHECK_OK(accel_accelerator_create(config, &acc));
        CHECK_OK(accel_model_create_from_json(kSpec, &m));
        CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
        CHECK_FAILS(accel_accelerator_prepare(acc, m, opt, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT,
                    "deepspeed_plugin.offload_optimizer_nvme_path");
        accel_optimizer_free(opt);
        accel_model_free(m);
        accel_accelerator_free(acc);
        remove(file);
    }
    accel_tensor_free(x);
    accel_tensor_free(y);
    rmdir(base);
}

/* Parameter offload to files (ZeRO-3, offload_param_device "nvme"): bit for bit the weights without it,
 * through free_memory and preparing again; no shard in memory after a step; a write made while summoned
 * reaches the file; a full disk during the step is named and the shard stays in memory; a path that is a file
 * is named at prepare time; the folder goes with the accelerator. */
static void test_param_offload(void)
{
    char base[256], config[1024], file[300];
    float ref[NPARAMS], got[NPARAMS];
    const char *zero3 = "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5}}";
    snprintf(base, sizeof base, "/tmp/accel-param-offload-test-%d", (int)getpid());
    train(zero3, ref);
    snprintf(config, sizeof config,
             "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5, "
             "\"offload_param_device\": \"nvme\", \"offload_param_nvme_path\": \"%s\"}}", base);
    train_freeing(config, got, 3);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    CHECK(entries(base, "accel-param-") == 0);
    /* bf16: 16-bit gathers from the float32 master shards in the files; summon and free_memory join the masters. */
    train("{\"mixed_precision\": \"bf16\", \"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, "
          "\"gradient_clipping\": 0.5}}", ref);
    snprintf(config, sizeof config,
             "{\"mixed_precision\": \"bf16\", \"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, "
             "\"gradient_clipping\": 0.5, \"offload_param_device\": \"nvme\", \"offload_param_nvme_path\": \"%s\"}}", base);
    train_freeing(config, got, 3);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    CHECK(entries(base, "accel-param-") == 0);

    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *x = NULL, *y = NULL, *out = NULL, *loss = NULL, *w = NULL;
    float xs[8 * NIN], ys[8 * NOUT], wv[16 * NIN], back[16 * NIN];
    char *stats = NULL;
    const char *key = "0.weight";
    int i;
    for (i = 0; i < 8 * NIN; ++i) xs[i] = (float)sin(0.1 * i);
    for (i = 0; i < 8 * NOUT; ++i) ys[i] = (float)cos(0.1 * i);
    for (i = 0; i < 16 * NIN; ++i) wv[i] = 0.01f * (float)i;
    x = matrix_f32(xs, 8, NIN);
    y = matrix_f32(ys, 8, NOUT);
    snprintf(config, sizeof config,
             "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_param_device\": \"nvme\", "
             "\"offload_param_nvme_path\": \"%s\"}}", base);
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    CHECK(entries(base, "accel-param-rank0-") == 1);
    /* Written while summoned: in the file afterwards, read back by the next summon. */
    CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    w = matrix_f32(wv, 16, NIN);
    CHECK_OK(accel_model_load_state_dict(m, &key, (const accel_tensor_t *const *)&w, 1, false));
    CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    accel_tensor_free(w);
    w = NULL;
    CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    CHECK_OK(accel_model_get_tensor(m, key, &w));
    CHECK_OK(accel_tensor_copy_to_buffer(w, back, sizeof back));
    CHECK(memcmp(wv, back, sizeof wv) == 0);
    accel_tensor_free(w);
    CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    for (i = 0; i < 3; ++i) {
        accel_status_t st;
        CHECK_OK(accel_model_forward(m, x, &out));
        CHECK_OK(accel_loss_compute("mse", out, y, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        if (i == 1) {
            /* A full disk (files above 256 bytes cannot be written: EFBIG): the step fails naming the file;
             * the shards that could not be written stay in memory, and the next step goes on from them. */
            st = step_with_file_limit(opt, 256);
            CHECK(st == ACCEL_ERR_RESOURCE_EXHAUSTED);
            CHECK(strstr(accel_last_error_message(), "param offload: cannot write") != NULL);
            CHECK(strstr(accel_last_error_message(), base) != NULL);
            CHECK_OK(accel_accelerator_get_memory_stats_json(acc, &stats));
            CHECK(strstr(stats, "\"parameter_bytes\": 0,") == NULL);
            accel_string_free(stats);
        } else {
            CHECK_OK(accel_optimizer_step(opt));
        }
        CHECK_OK(accel_optimizer_zero_grad(opt));
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    CHECK_OK(accel_accelerator_get_memory_stats_json(acc, &stats));
    printf("param offload nvme: %s\n", stats);
    CHECK(strstr(stats, "\"parameter_bytes\": 0,") != NULL);
    CHECK(strstr(stats, "\"offloaded_parameter_bytes\": 0,") == NULL);
    accel_string_free(stats);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    CHECK(entries(base, "accel-param-") == 0);

    /* A path that is a file: named at prepare time. */
    snprintf(file, sizeof file, "%s/not-a-folder", base);
    {
        FILE *f = fopen(file, "w");
        CHECK(f != NULL);
        if (f) fclose(f);
    }
    snprintf(config, sizeof config,
             "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_param_device\": \"nvme\", "
             "\"offload_param_nvme_path\": \"%s\"}}", file);
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_FAILS(accel_accelerator_prepare_model(acc, m), ACCEL_ERR_INVALID_ARGUMENT,
                "deepspeed_plugin.offload_param_nvme_path");
    /* Refused before anything of the model changed: it still computes. */
    CHECK_OK(accel_model_forward(m, x, &out));
    accel_tensor_free(out);
    accel_model_free(m);
    accel_accelerator_free(acc);
    remove(file);
    accel_tensor_free(x);
    accel_tensor_free(y);
    rmdir(base);
}

/* The batch of 8 that one_step trains on. */
static void one_step_batch(accel_tensor_t **x, accel_tensor_t **y)
{
    float xs[8 * NIN], ys[8 * NOUT];
    int i;
    for (i = 0; i < 8 * NIN; ++i) xs[i] = (float)sin(0.1 * i);
    for (i = 0; i < 8 * NOUT; ++i) ys[i] = (float)cos(0.1 * i);
    *x = matrix_f32(xs, 8, NIN);
    *y = matrix_f32(ys, 8, NOUT);
}

/* One prepared step (forward, mse loss, backward, optimizer step) of kSpec under `config`; the memory
 * statistics after the forward (when `after_forward` is not NULL) and after the step (free both with
 * accel_string_free). */
static void one_step(const char *config, accel_tensor_t *x, accel_tensor_t *y, char **after_forward, char **after_step)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *out = NULL, *loss = NULL;
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    CHECK_OK(accel_model_forward(m, x, &out));
    if (after_forward != NULL) CHECK_OK(accel_accelerator_get_memory_stats_json(acc, after_forward));
    CHECK_OK(accel_loss_compute("mse", out, y, &loss));
    CHECK_OK(accel_accelerator_backward(acc, loss));
    CHECK_OK(accel_optimizer_step(opt));
    CHECK_OK(accel_accelerator_get_memory_stats_json(acc, after_step));
    accel_tensor_free(out);
    accel_tensor_free(loss);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* hf_ds_config's zero_optimization sizes at prepare (ZeRO-3, one process; units: layers 0, 2 and 4 with 112, 272
 * and 51 parameters): Hugging Face's usual block trains as ZeRO-3 does, bit for bit; stage3_max_reuse_distance
 * keeps units gathered from their forward to their backward, within stage3_max_live_parameters; sub_group_size
 * below a shard steps it in pieces. */
static void test_deepspeed_sizes(void)
{
    char config[1024];
    float ref[NPARAMS], got[NPARAMS];
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5}}", ref);
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"gradient_clipping\": 0.5, \"hf_ds_config\": "
          "{\"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"contiguous_gradients\": true, "
          "\"sub_group_size\": 1e9, \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\", "
          "\"stage3_param_persistence_threshold\": \"auto\", \"stage3_max_live_parameters\": 1e9, "
          "\"stage3_max_reuse_distance\": 1e9, \"stage3_gather_16bit_weights_on_model_save\": true}}}}", got);
    CHECK(memcmp(ref, got, sizeof ref) == 0);

    /* Gathered after a forward that a backward follows: the units kept. */
    struct {
        const char *sizes;
        const char *gathered;
    } kept[] = {
        {"", "\"gathered_bytes\": 1740,"},                                               /* DeepSpeed's 1e9 */
        {", \"stage3_max_reuse_distance\": 1e9", "\"gathered_bytes\": 1740,"},           /* all three */
        {", \"stage3_max_reuse_distance\": 0", "\"gathered_bytes\": 204,"},              /* the last: 51 x 4 */
        {", \"stage3_max_reuse_distance\": 101", "\"gathered_bytes\": 204,"},            /* layer 2: 2 x 51 away */
        {", \"stage3_max_reuse_distance\": 102", "\"gathered_bytes\": 1292,"},           /* ... within 102 */
        {", \"stage3_max_reuse_distance\": 1e9, \"stage3_max_live_parameters\": 435", "\"gathered_bytes\": 0,"},
        {", \"stage3_max_reuse_distance\": 1e9, \"stage3_max_live_parameters\": 486", "\"gathered_bytes\": 204,"},
    };
    size_t c;
    accel_tensor_t *x = NULL, *y = NULL;
    one_step_batch(&x, &y);
    for (c = 0; c < sizeof kept / sizeof kept[0]; ++c) {
        char *forward = NULL, *stats = NULL;
        snprintf(config, sizeof config,
                 "{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3%s}}}}", kept[c].sizes);
        one_step(config, x, y, &forward, &stats);
        if (strstr(forward, kept[c].gathered) == NULL) fprintf(stderr, "%s: expected %s in %s\n", config, kept[c].gathered, forward);
        CHECK(strstr(forward, kept[c].gathered) != NULL);
        CHECK(strstr(stats, "\"gathered_bytes\": 0,") != NULL); /* all released after the backward */
        {
            /* Within stage3_max_live_parameters (float32: 4 bytes an element) through forward and backward. */
            const char *live = strstr(config, "stage3_max_live_parameters\": ");
            const char *peak = strstr(stats, "\"peak_gathered_bytes\": ");
            CHECK(peak != NULL);
            if (live != NULL && peak != NULL) CHECK(atoll(peak + 23) <= 4 * atoll(live + 29));
        }
        accel_string_free(forward);
        accel_string_free(stats);
    }

    /* stage3_max_live_parameters below what the units need together (435) or below one unit (272): it bounds
     * what is fetched ahead and kept, never a unit about to compute, as DeepSpeed always fetches the module
     * it runs. Training is unchanged; 434 still gathers layers 0 and 2 together (4 all-gathers where the
     * defaults take 1), and below a unit each is gathered alone for its forward and again for its backward
     * (6), never more gathered at once than without any prefetching or keeping. */
    {
        struct {
            const char *limit, *all_gathers;
        } limits[] = {{"434", "\"all_gathers\": 4,"}, {"272", "\"all_gathers\": 6,"}, {"1", "\"all_gathers\": 6,"}};
        char *forward = NULL, *stats = NULL, *plain = NULL;
        one_step("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                 "\"stage3_prefetch_bucket_size\": 0, \"stage3_max_reuse_distance\": 0}}}}", x, y, NULL, &plain);
        for (c = 0; c < sizeof limits / sizeof limits[0]; ++c) {
            const long long limit = atoll(limits[c].limit), peak_plain = json_int(plain, "peak_gathered_bytes");
            snprintf(config, sizeof config, "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"gradient_clipping\": 0.5, "
                     "\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"stage3_max_live_parameters\": %s}}}}", limits[c].limit);
            train(config, got);
            CHECK(memcmp(ref, got, sizeof ref) == 0);
            snprintf(config, sizeof config, "{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                     "\"stage3_max_live_parameters\": %s}}}}", limits[c].limit);
            one_step(config, x, y, &forward, &stats);
            CHECK(strstr(forward, "\"gathered_bytes\": 0,") != NULL); /* nothing kept for the backward */
            CHECK(strstr(stats, limits[c].all_gathers) != NULL);
            CHECK(peak_plain > 0);
            CHECK(json_int(stats, "peak_gathered_bytes") <= (4 * limit > peak_plain ? 4 * limit : peak_plain));
            accel_string_free(forward);
            accel_string_free(stats);
        }
        accel_string_free(plain);
    }

    /* sub_group_size below a shard (layer 2's is 272 elements here): the optimizer steps each shard in pieces
     * of at most that many (1: element by element), bit for bit the whole shard's step. */
    {
        const char *subs[] = {"100", "1"};
        for (c = 0; c < sizeof subs / sizeof subs[0]; ++c) {
            snprintf(config, sizeof config, "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"gradient_clipping\": 0.5, "
                     "\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"sub_group_size\": %s}}}}", subs[c]);
            train(config, got);
            CHECK(memcmp(ref, got, sizeof ref) == 0);
        }
    }
    /* Other sizes: accepted. Stage-3 sizes under stage 2 do not apply (DeepSpeed ignores them too). */
    {
        accel_accelerator_t *acc = NULL;
        accel_model_t *m = NULL;
        CHECK_OK(accel_accelerator_create("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                                          "\"sub_group_size\": 272, \"reduce_bucket_size\": 272, \"stage3_prefetch_bucket_size\": 272, "
                                          "\"stage3_max_live_parameters\": 435}}}}", &acc));
        CHECK_OK(accel_model_create_from_json(kSpec, &m));
        CHECK_OK(accel_accelerator_prepare_model(acc, m));
        accel_model_free(m);
        accel_accelerator_free(acc);
        CHECK_OK(accel_accelerator_create("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2, "
                                          "\"sub_group_size\": 1, \"stage3_max_live_parameters\": 1}}}}", &acc));
        CHECK_OK(accel_model_create_from_json(kSpec, &m));
        CHECK_OK(accel_accelerator_prepare_model(acc, m));
        accel_model_free(m);
        accel_accelerator_free(acc);
    }
    accel_tensor_free(x);
    accel_tensor_free(y);
}

/* stage3_param_persistence_threshold: parameters of at most that many elements join the root unit, gathered
 * once before the forward and kept through the backward, the rest move with their layer (weights of 96, 256 and
 * 48 elements, biases of 16, 16 and 3); a layer left without parameters is no unit. Nothing fetched ahead and
 * every layer but the last released after its forward, to make the difference visible. Training is ZeRO-3's
 * without the threshold, bit for bit. */
static void test_persistence(void)
{
    struct {
        const char *threshold;
        const char *gathered; /* after the forward: the root and the last unit */
        const char *counts;
    } cases[] = {
        {"0", "\"gathered_bytes\": 204,", "\"all_gathers\": 5,"},       /* layers 0, 2, 4; 2 and 0 again */
        {"16", "\"gathered_bytes\": 332,", "\"all_gathers\": 6,"},      /* + the biases (35) in the root */
        {"100", "\"gathered_bytes\": 1740,", "\"all_gathers\": 2,"},    /* root 179, layer 2 the only unit */
        {"1e9", "\"gathered_bytes\": 1740,", "\"all_gathers\": 1,"},    /* everything in the root */
        /* stage3_model_persistence_threshold: in parameter order while the total stays within 150 elements:
         * 0.weight, 0.bias, 2.bias and 4.bias (131; not 4.weight); layer 0 is no unit; 2 is gathered again. */
        {"100, \"stage3_model_persistence_threshold\": 150", "\"gathered_bytes\": 716,", "\"all_gathers\": 4,"},
    };
    char config[512];
    float ref[NPARAMS], got[NPARAMS];
    size_t c;
    accel_tensor_t *x = NULL, *y = NULL;
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5}}", ref);
    one_step_batch(&x, &y);
    for (c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        char *forward = NULL, *stats = NULL;
        const char *zero = "{\"stage\": 3, \"stage3_max_reuse_distance\": 0, \"stage3_prefetch_bucket_size\": 0, "
                           "\"stage3_param_persistence_threshold\": ";
        snprintf(config, sizeof config, "{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": %s%s}}}}",
                 zero, cases[c].threshold);
        one_step(config, x, y, &forward, &stats);
        if (strstr(forward, cases[c].gathered) == NULL || strstr(stats, cases[c].counts) == NULL)
            fprintf(stderr, "%s: expected %s and %s in %s / %s\n", config, cases[c].gathered, cases[c].counts, forward, stats);
        CHECK(strstr(forward, cases[c].gathered) != NULL);
        CHECK(strstr(stats, cases[c].counts) != NULL);
        CHECK(strstr(stats, "\"gathered_bytes\": 0,") != NULL); /* the root too, after the backward */
        accel_string_free(forward);
        accel_string_free(stats);
        snprintf(config, sizeof config, "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"gradient_clipping\": "
                 "0.5, \"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": %s}}}}",
                 cases[c].threshold);
        train(config, got);
        CHECK(memcmp(ref, got, sizeof ref) == 0);
    }
    accel_tensor_free(x);
    accel_tensor_free(y);
}

/* DeepSpeed's buckets: consecutive units (layers 0, 2 and 4: 112, 272 and 51 parameters) move in one
 * collective while they fit reduce_bucket_size and stage3_prefetch_bucket_size (ZeRO-3: the units gathered ahead of the one computing); FSDP moves one unit per
 * collective. Counted over one step; the weights are those of the default buckets, bit for bit. */
static void test_deepspeed_buckets(void)
{
    struct {
        const char *config;
        const char *counts;
    } cases[] = {
        /* DeepSpeed's defaults (5e7 ahead, 5e8 per reduction, reuse distance and live limit 1e9): the model in
         * one gather, kept from forward to backward, one reduction. */
        {"{\"deepspeed_plugin\": {\"zero_stage\": 3}}", "\"all_gathers\": 1, \"gradient_reductions\": 1}"},
        /* forward [0, 1] then [2], kept; reduced [2, 1] (323 elements) then [0]. */
        {"{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 272, "
         "\"reduce_bucket_size\": 323}}}}",
         "\"all_gathers\": 2, \"gradient_reductions\": 2}"},
        /* reuse distance 0: only the last layer is kept; backward gathers [1, 0] */
        {"{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 272, "
         "\"reduce_bucket_size\": 323, \"stage3_max_reuse_distance\": 0}}}}",
         "\"all_gathers\": 3, \"gradient_reductions\": 2}"},
        /* nothing fetched ahead: a layer per gather, 3 in forward and layers 2 and 0 again in backward */
        {"{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 0, "
         "\"stage3_max_reuse_distance\": 0}}}}",
         "\"all_gathers\": 5, \"gradient_reductions\": 1}"},
        /* Buckets smaller than a layer: each layer moves alone (DeepSpeed moves a parameter larger than its
         * bucket alone); the prefetch still fetches the next layer, [1, 2] after [0]. */
        {"{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 100, "
         "\"reduce_bucket_size\": 10}}}}",
         "\"all_gathers\": 2, \"gradient_reductions\": 3}"},
        {"{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2, \"allgather_bucket_size\": 1, "
         "\"reduce_bucket_size\": 1}}}}",
         "\"all_gathers\": 0, \"gradient_reductions\": 3}"},
        /* In one process ZeRO-1/2 have nothing to gather after the step (the 2-process tests do). */
        {"{\"deepspeed_plugin\": {\"zero_stage\": 2}}", "\"all_gathers\": 0, \"gradient_reductions\": 1}"},
        {"{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2, \"allgather_bucket_size\": 384, "
         "\"reduce_bucket_size\": 323}}}}",
         "\"all_gathers\": 0, \"gradient_reductions\": 2}"},
        {"{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 1, \"reduce_bucket_size\": 272}}}}",
         "\"all_gathers\": 0, \"gradient_reductions\": 3}"},
        /* FSDP: every linear layer a unit, each gathered before its forward and its backward */
        {"{\"fsdp_plugin\": {\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\", \"transformer_cls_names_to_wrap\": [\"linear\"]}}",
         "\"all_gathers\": 6, \"gradient_reductions\": 3}"},
        {"{\"fsdp_plugin\": {}}", "\"all_gathers\": 1, \"gradient_reductions\": 1}"},
    };
    float ref[NPARAMS], got[NPARAMS];
    size_t c;
    accel_tensor_t *x = NULL, *y = NULL;
    one_step_batch(&x, &y);
    for (c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        char *stats = NULL;
        one_step(cases[c].config, x, y, NULL, &stats);
        if (strstr(stats, cases[c].counts) == NULL) fprintf(stderr, "%s: expected %s in %s\n", cases[c].config, cases[c].counts, stats);
        CHECK(strstr(stats, cases[c].counts) != NULL);
        accel_string_free(stats);
    }
    accel_tensor_free(x);
    accel_tensor_free(y);
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3}}", ref);
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
          "\"stage3_prefetch_bucket_size\": 272, \"reduce_bucket_size\": 323}}}}", got);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
          "\"stage3_prefetch_bucket_size\": 100, \"reduce_bucket_size\": 10}}}}", got);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 2}}", ref);
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2, "
          "\"allgather_bucket_size\": 384, \"reduce_bucket_size\": 323}}}}", got);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
}

/* deepspeed_plugin.zero3_init_flag: while such an accelerator lives, models are built partitioned; they cannot
 * compute or be read until prepared (named), their shapes and names are there; prepared under ZeRO-3 they train
 * to the weights of ZeRO-3 without the flag, bit for bit, and prepared without sharding they are whole again and
 * train as plain training does. Models built after the accelerator is freed are whole. Below stage 3 the flag
 * is refused, naming it. */
static void test_zero3_init(void)
{
    float ref[NPARAMS], got[NPARAMS];
    const char *flagged = "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, "
                          "\"gradient_clipping\": 0.5, \"zero3_init_flag\": true}}";
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 3, \"gradient_clipping\": 0.5}}", ref);
    train(flagged, got);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    /* Stage 3 given by hf_ds_config. */
    train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"gradient_clipping\": 0.5, \"zero3_init_flag\": true, "
          "\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3}}}}", got);
    CHECK(memcmp(ref, got, sizeof ref) == 0);

    {
        accel_accelerator_t *acc = NULL, *plain = NULL;
        accel_model_t *m = NULL, *later = NULL;
        accel_tensor_t *x = NULL, *y = NULL, *out = NULL;
        const char *name = NULL;
        int64_t numel = 0;
        one_step_batch(&x, &y);
        CHECK_OK(accel_random_set_seed(3, false, false));
        CHECK_OK(accel_accelerator_create(flagged, &acc));
        CHECK_OK(accel_model_create_from_json(kSpec, &m));
        CHECK_FAILS(accel_model_forward(m, x, &out), ACCEL_ERR_FAILED_PRECONDITION, "zero3_init_flag");
        CHECK_FAILS(accel_model_get_tensor(m, "0.weight", &out), ACCEL_ERR_FAILED_PRECONDITION, "zero3_init_flag");
        CHECK_OK(accel_model_get_parameter_numel(m, &numel));
        CHECK(numel == NPARAMS);
        CHECK_OK(accel_model_get_parameter_name(m, 0, &name));
        CHECK(name != NULL && strcmp(name, "0.weight") == 0);
        /* Prepared by an accelerator without sharding: whole again, the weights of a model built without
         * the flag from the same seed. */
        CHECK_OK(accel_accelerator_create(NULL, &plain));
        CHECK_OK(accel_accelerator_prepare_model(plain, m));
        CHECK(read_params_f32(m, got, NPARAMS) == NPARAMS);
        accel_accelerator_free(plain);
        accel_accelerator_free(acc);
        CHECK_OK(accel_random_set_seed(3, false, false));
        CHECK_OK(accel_model_create_from_json(kSpec, &later)); /* no flag alive: whole */
        CHECK(read_params_f32(later, ref, NPARAMS) == NPARAMS);
        CHECK(memcmp(ref, got, sizeof ref) == 0);
        CHECK_OK(accel_model_forward(later, x, &out));
        accel_tensor_free(out);
        CHECK_OK(accel_model_forward(m, x, &out));
        accel_tensor_free(out);
        accel_model_free(later);
        accel_model_free(m);
        accel_tensor_free(x);
        accel_tensor_free(y);
    }
    {
        accel_accelerator_t *acc = NULL;
        CHECK_FAILS(accel_accelerator_create("{\"deepspeed_plugin\": {\"zero_stage\": 2, \"zero3_init_flag\": true}}", &acc),
                    ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.zero3_init_flag: true applies to ZeRO stage 3 only (zero_stage is 2)");
    }
}


/* ---- hf_ds_config's optimizer and scheduler blocks (Accelerate's DummyOptim / DummyScheduler) ---------- */

/* 6 optimizer steps (accumulation 2, batch 8) under `config` with `opt_json` / `sched_json` (NULL: none);
 * the learning rate after each optimizer step goes to lrs[k], and with set_lrs the optimizer's lr is set to
 * set_lrs[k] before step k. Final weights to `w`. */
static void ds_train(const char *config, const char *opt_json, const char *sched_json, float *w, double *lrs,
                     const double *set_lrs)
{
    float x[N * NIN], y[N * NOUT];
    int i, steps = 0;
    for (i = 0; i < N * NIN; ++i) x[i] = (float)sin(0.37 * (double)i);
    for (i = 0; i < N * NOUT; ++i) y[i] = (float)cos(0.21 * (double)i);
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *sched = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *tx = matrix_f32(x, N, NIN), *ty = matrix_f32(y, N, NOUT);
    CHECK_OK(accel_random_set_seed(3, false, false));
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, opt_json, &opt));
    if (sched_json != NULL) CHECK_OK(accel_scheduler_create(opt, sched_json, &sched));
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 8, \"shuffle\": false}", &dl));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, sched));
    while (steps < 6 && acc != NULL && opt != NULL) {
        accel_batch_t *b = NULL;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) continue;
        accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
        bool sync = false;
        CHECK_OK(accel_accelerator_accumulate_begin(acc, m));
        CHECK_OK(accel_batch_get_inputs(b, &in));
        CHECK_OK(accel_batch_get_labels(b, &lab));
        CHECK_OK(accel_model_forward(m, in, &out));
        CHECK_OK(accel_loss_compute("mse", out, lab, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_accelerator_get_sync_gradients(acc, &sync));
        if (sync && set_lrs != NULL) CHECK_OK(accel_optimizer_set_lr(opt, set_lrs[steps]));
        CHECK_OK(accel_optimizer_step(opt));
        if (sched != NULL) CHECK_OK(accel_scheduler_step(sched));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        CHECK_OK(accel_accelerator_accumulate_end(acc));
        if (sync) CHECK_OK(accel_optimizer_get_lr(opt, &lrs[steps++]));
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_tensor_free(out);
        accel_tensor_free(loss);
        accel_batch_free(b);
    }
    CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    CHECK(read_params_f32(m, w, NPARAMS) == NPARAMS);
    CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    accel_dataloader_free(dl);
    accel_scheduler_free(sched);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    accel_accelerator_free(acc);
}

/* A DeepSpeed config with "optimizer" (AdamW, lr and weight_decay "auto") and "scheduler" (WarmupDecayLR, every
 * value "auto") blocks and Accelerate's DummyOptim(lr=0.01, weight_decay=0.1) / DummyScheduler(total_num_steps=8,
 * warmup_num_steps=3): the schedule is DeepSpeed's (iteration -1 first, min 0, max the optimizer's lr, linear
 * warmup over 3 steps, linear decay to step 8), stepped once per optimizer step, and the weights are those of
 * LibTorch's AdamW with the same betas, eps and weight decay at those learning rates, bit for bit. */
static void test_deepspeed_blocks(void)
{
    /* DeepSpeed's WarmupDecayLR (linear, min 0, max 0.01, W 3, T 8) at iterations -1..5 */
    const double want[7] = {0.0, 0.0, 0.01 / 3.0, 0.02 / 3.0, 0.01, 0.008, 0.006};
    float ref[NPARAMS], got[NPARAMS];
    double lrs[6], ref_lrs[6];
    int k, lr_ok = 1;
    char config[1024];
    snprintf(config, sizeof config,
             "{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": "
             "{\"stage\": 2}, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"weight_decay\": \"auto\", "
             "\"betas\": [0.9, 0.95], \"eps\": 1e-7}}, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
             "{\"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\", "
             "\"total_num_steps\": \"auto\", \"warmup_type\": \"linear\"}}}}}");
    ds_train(config, "{\"type\": \"dummy\", \"lr\": 0.01, \"weight_decay\": 0.1}",
             "{\"type\": \"dummy\", \"total_num_steps\": 8, \"warmup_num_steps\": 3}", got, lrs, NULL);
    for (k = 0; k < 6; ++k) lr_ok = lr_ok && fabs(lrs[k] - want[k + 1]) < 1e-15;
    if (!lr_ok) fprintf(stderr, "deepspeed scheduler: lrs %g %g %g %g %g %g\n", lrs[0], lrs[1], lrs[2], lrs[3], lrs[4], lrs[5]);
    CHECK(lr_ok);
    ds_train("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 2}}",
             "{\"type\": \"adamw\", \"lr\": 0.0, \"weight_decay\": 0.1, \"betas\": [0.9, 0.95], \"eps\": 1e-7}", NULL, ref,
             ref_lrs, want);
    CHECK(memcmp(ref, got, sizeof ref) == 0);

    /* Named refusals (at create for the blocks, at prepare for what the program passed). */
    struct {
        const char *ds, *opt, *sched;
        accel_status_t code;
        const char *message;
    } bad[] = {
        {"\"optimizer\": {\"type\": \"Lamb\"}", NULL, NULL, ACCEL_ERR_UNIMPLEMENTED, "hf_ds_config.optimizer.type: DeepSpeed's \"Lamb\""},
        {"\"optimizer\": {\"type\": \"Adamax\"}", NULL, NULL, ACCEL_ERR_INVALID_ARGUMENT, "hf_ds_config.optimizer.type: expected"},
        {"\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": \"auto\"}}", NULL, NULL, ACCEL_ERR_INVALID_ARGUMENT,
         "hf_ds_config.optimizer.params.betas: \"auto\" is filled only for lr and weight_decay"},
        {"\"optimizer\": {\"type\": \"Adam\", \"params\": {\"eps\": -1}}", NULL, NULL, ACCEL_ERR_INVALID_ARGUMENT,
         "hf_ds_config.optimizer.params.eps"},
        {"\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}}", NULL, NULL, ACCEL_ERR_INVALID_ARGUMENT,
         "hf_ds_config.optimizer.params.momentum: unknown key"},
        {"\"scheduler\": {\"type\": \"OneCycle\"}", NULL, NULL, ACCEL_ERR_UNIMPLEMENTED, "hf_ds_config.scheduler.type: DeepSpeed's \"OneCycle\""},
        {"\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {}}", NULL, NULL, ACCEL_ERR_INVALID_ARGUMENT,
         "hf_ds_config.scheduler.params.total_num_steps: required"},
        {"\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"cubic\"}}", NULL, NULL, ACCEL_ERR_INVALID_ARGUMENT,
         "hf_ds_config.scheduler.params.warmup_type"},
        {"\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": [0.1, 0.2]}}", NULL, NULL, ACCEL_ERR_UNIMPLEMENTED,
         "hf_ds_config.scheduler.params.warmup_max_lr: one value per parameter group"},
        /* at prepare */
        {"\"optimizer\": {\"type\": \"AdamW\"}", "{\"type\": \"adamw\"}", NULL, ACCEL_ERR_INVALID_ARGUMENT,
         "hf_ds_config.optimizer: the DeepSpeed config has an optimizer and the program passed one"},
        {"\"zero_allow_untested_optimizer\": true", "{\"type\": \"dummy\"}", NULL, ACCEL_ERR_INVALID_ARGUMENT,
         "optimizer: a dummy optimizer (Accelerate's DummyOptim) needs an optimizer block"},
        {"\"scheduler\": {\"type\": \"WarmupLR\"}", "{\"type\": \"adamw\"}", "{\"type\": \"linear\", \"num_training_steps\": 5}",
         ACCEL_ERR_INVALID_ARGUMENT, "hf_ds_config.scheduler: the DeepSpeed config has a scheduler and the program passed one"},
        {"\"zero_allow_untested_optimizer\": true", "{\"type\": \"adamw\"}", "{\"type\": \"dummy\"}", ACCEL_ERR_INVALID_ARGUMENT,
         "scheduler: a dummy scheduler (Accelerate's DummyScheduler) needs a scheduler block"},
        {"\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": \"auto\"}}", "{\"type\": \"adamw\"}",
         "{\"type\": \"dummy\"}", ACCEL_ERR_INVALID_ARGUMENT, "total_num_steps: \"auto\" needs the dummy scheduler's total_num_steps"},
    };
    size_t c;
    for (c = 0; c < sizeof bad / sizeof bad[0]; ++c) {
        accel_accelerator_t *acc = NULL;
        accel_model_t *m = NULL;
        accel_optimizer_t *opt = NULL;
        accel_scheduler_t *sched = NULL;
        accel_status_t st;
        snprintf(config, sizeof config, "{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, %s}}}",
                 bad[c].ds);
        if (bad[c].opt == NULL) {
            CHECK_FAILS(accel_accelerator_create(config, &acc), bad[c].code, bad[c].message);
            continue;
        }
        CHECK_OK(accel_accelerator_create(config, &acc));
        CHECK_OK(accel_model_create_from_json(kSpec, &m));
        CHECK_OK(accel_optimizer_create(m, bad[c].opt, &opt));
        if (bad[c].sched != NULL) CHECK_OK(accel_scheduler_create(opt, bad[c].sched, &sched));
        st = accel_accelerator_prepare(acc, m, opt, NULL, sched);
        CHECK_FAILS(st, bad[c].code, bad[c].message);
        accel_scheduler_free(sched);
        accel_optimizer_free(opt);
        accel_model_free(m);
        accel_accelerator_free(acc);
    }
    /* A dummy optimizer or scheduler does not step unprepared. */
    {
        accel_model_t *m = NULL;
        accel_optimizer_t *opt = NULL;
        accel_scheduler_t *sched = NULL;
        CHECK_OK(accel_model_create_from_json(kSpec, &m));
        CHECK_OK(accel_optimizer_create(m, "{\"type\": \"dummy\", \"lr\": 0.5}", &opt));
        CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"dummy\", \"warmup_num_steps\": 2}", &sched));
        CHECK_FAILS(accel_optimizer_step(opt), ACCEL_ERR_FAILED_PRECONDITION, "dummy optimizer");
        CHECK_FAILS(accel_scheduler_step(sched), ACCEL_ERR_FAILED_PRECONDITION, "dummy scheduler");
        accel_optimizer_t *other = NULL;
        CHECK_FAILS(accel_optimizer_create(m, "{\"type\": \"dummy\", \"betas\": [0.9, 0.9]}", &other), ACCEL_ERR_INVALID_ARGUMENT,
                    "betas: unknown key");
        accel_scheduler_free(sched);
        accel_optimizer_free(opt);
        accel_model_free(m);
    }
}

static int path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* save_state under deepspeed_plugin into a folder that holds more: DeepSpeed's entries (pytorch_model/,
 * latest, zero_to_fp32.py) of an earlier save are replaced, the user's entries kept; a user's entry under a
 * name the save writes is refused, naming it, with nothing changed; a later plain save removes the stale
 * DeepSpeed entries and keeps the user's. */
static void test_deepspeed_save_into_folder(void)
{
    accel_accelerator_t *acc = NULL, *plain = NULL;
    accel_model_t *m = NULL, *m2 = NULL;
    accel_optimizer_t *opt = NULL;
    FILE *f;
    mkdir("ds_users", 0755);
    CHECK((f = fopen("ds_users/notes.txt", "w")) != NULL);
    if (f != NULL) fclose(f);
    mkdir("ds_users/pytorch_model", 0755);
    CHECK((f = fopen("ds_users/pytorch_model/mine.txt", "w")) != NULL);
    if (f != NULL) fclose(f);
    CHECK_OK(accel_accelerator_create("{\"deepspeed_plugin\": {\"zero_stage\": 2}}", &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adam\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    CHECK_FAILS(accel_accelerator_save_state(acc, "ds_users"), ACCEL_ERR_ALREADY_EXISTS, "ds_users/pytorch_model\"");
    CHECK(path_exists("ds_users/pytorch_model/mine.txt") && !path_exists("ds_users/latest"));
    CHECK(!path_exists(".ds_users.accel-tmp"));
    CHECK(unlink("ds_users/pytorch_model/mine.txt") == 0 && rmdir("ds_users/pytorch_model") == 0);
    CHECK(symlink("notes.txt", "ds_users/latest") == 0);
    CHECK_FAILS(accel_accelerator_save_state(acc, "ds_users"), ACCEL_ERR_ALREADY_EXISTS, "ds_users/latest\"");
    CHECK(unlink("ds_users/latest") == 0);
    CHECK_OK(accel_accelerator_save_state(acc, "ds_users"));
    CHECK_OK(accel_accelerator_save_state(acc, "ds_users")); /* over its own DeepSpeed entries */
    CHECK(path_exists("ds_users/notes.txt") && path_exists("ds_users/latest") && path_exists("ds_users/zero_to_fp32.py"));
    CHECK(path_exists("ds_users/pytorch_model/mp_rank_00_model_states.pt"));
    CHECK_OK(accel_accelerator_load_state(acc, "ds_users"));

    CHECK_OK(accel_accelerator_create(NULL, &plain));
    CHECK_OK(accel_model_create_from_json(kSpec, &m2));
    CHECK_OK(accel_accelerator_prepare_model(plain, m2));
    CHECK_OK(accel_accelerator_save_state(plain, "ds_users"));
    CHECK(path_exists("ds_users/notes.txt") && path_exists("ds_users/model.safetensors"));
    CHECK(!path_exists("ds_users/latest") && !path_exists("ds_users/zero_to_fp32.py") && !path_exists("ds_users/pytorch_model"));
    accel_model_free(m2);
    accel_accelerator_free(plain);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

int main(void)
{
    test_strategies_match_plain_training();
    test_free_memory_and_prepare_again();
    test_summon_memory_and_errors();
    test_bad_wrap_class();
    test_deepspeed_fp16_scaler();
    test_deepspeed_auto_micro_batch();
    test_deepspeed_fixed_micro_batch_warns();
    test_optimizer_offload();
    test_param_offload();
    test_deepspeed_sizes();
    test_deepspeed_buckets();
    test_persistence();
    test_zero3_init();
    test_deepspeed_blocks();
    test_deepspeed_save_into_folder();
    return capi_report("test_sharding");
}
