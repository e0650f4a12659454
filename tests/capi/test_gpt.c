/* The "gpt" model through the C API: token data loaders, the causal_lm loss in train_step, tied weights
 * through optimizer steps and save_state/load_state, generation (greedy, seeded sampling, KV cache),
 * bad keys named. With the argument "reference" (needs Python's torch, see gpt_reference.py): a GPT-2
 * file in Hugging Face's layout loads and gives the logits of the GPT-2 equations within 1e-5, and
 * save_model writes that layout back. */
#include "capi_helpers.h"

#include <sys/stat.h>

static const char *kSpec = "{\"type\": \"gpt\", \"vocab_size\": 23, \"n_positions\": 16, \"n_embd\": 16,"
                           " \"n_layer\": 2, \"n_head\": 2, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0,"
                           " \"attn_pdrop\": 0.0}";

/* A token stream with structure to learn: t[i] = (3 i + i / 7) mod 23. */
static accel_tensor_t *stream(int64_t n)
{
    int64_t *data = (int64_t *)malloc((size_t)n * sizeof(int64_t)), i;
    accel_tensor_t *t;
    for (i = 0; i < n; ++i) data[i] = (3 * i + i / 7) % 23;
    t = tensor_i64(data, &n, 1);
    free(data);
    return t;
}

static void test_token_loader(void)
{
    accel_tensor_t *tokens = stream(21), *x = NULL, *y = NULL, *bad = NULL;
    accel_dataloader_t *dl = NULL;
    accel_batch_t *b = NULL;
    int64_t len = 0, xs[8], ys[8], two[2] = {3, 7};
    float f[21] = {0};
    int i;
    CHECK_OK(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 4, \"batch_size\": 2}", &dl));
    CHECK_OK(accel_dataloader_get_length(dl, &len));
    CHECK(len == 3); /* (21 - 5) / 4 + 1 = 5 windows, batches of 2 */
    CHECK_OK(accel_dataloader_next(dl, &b));
    CHECK(b != NULL);
    CHECK_OK(accel_batch_get_inputs(b, &x));
    CHECK_OK(accel_batch_get_labels(b, &y));
    CHECK(shape2_is(x, 2, 4) && shape2_is(y, 2, 4));
    CHECK_OK(accel_tensor_copy_to_buffer(x, xs, sizeof xs));
    CHECK_OK(accel_tensor_copy_to_buffer(y, ys, sizeof ys));
    for (i = 0; i < 8; ++i) {
        int64_t pos = (i / 4) * 4 + i % 4; /* window w starts at 4 w */
        CHECK(xs[i] == (3 * pos + pos / 7) % 23);
        CHECK(ys[i] == (3 * (pos + 1) + (pos + 1) / 7) % 23);
    }
    accel_tensor_free(x);
    accel_tensor_free(y);
    accel_batch_free(b);
    accel_dataloader_free(dl);
    dl = NULL;
    /* Overlapping windows. */
    CHECK_OK(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 4, \"stride\": 1}", &dl));
    CHECK_OK(accel_dataloader_get_length(dl, &len));
    CHECK(len == 17);
    accel_dataloader_free(dl);
    dl = NULL;

    CHECK_FAILS(accel_dataloader_create_from_tokens(tokens, "{\"batch_size\": 2}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                "block_size: required");
    CHECK(dl == NULL);
    CHECK_FAILS(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 21}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                "tokens: 21 tokens do not make one sequence of block_size + 1 = 22");
    CHECK_OK(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 20}", &dl)); /* just fits */
    accel_dataloader_free(dl);
    dl = NULL;
    CHECK_FAILS(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 4, \"strides\": 2}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "strides: unknown key");
    CHECK_FAILS(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 0}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                "block_size:");
    CHECK_FAILS(accel_dataloader_create_from_tokens(NULL, "{\"block_size\": 4}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                "tokens");
    bad = tensor_i64(xs, two, 2);
    CHECK_FAILS(accel_dataloader_create_from_tokens(bad, "{\"block_size\": 4}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                "tokens: expected a 1-d token stream, got shape [3, 7]");
    accel_tensor_free(bad);
    len = 21;
    CHECK_OK(accel_tensor_create(f, sizeof f, ACCEL_DTYPE_FLOAT32, &len, 1, &bad));
    CHECK_FAILS(accel_dataloader_create_from_tokens(bad, "{\"block_size\": 4}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                "tokens: expected an integer dtype, got Float");
    accel_tensor_free(bad);
    accel_tensor_free(tokens);
}

static int same_tensor(const accel_model_t *m, const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    float *va = model_tensor_f32(m, a, &na), *vb = model_tensor_f32(m, b, &nb);
    int same = va != NULL && vb != NULL && na == nb && na > 0 && memcmp(va, vb, na * sizeof(float)) == 0;
    free(va);
    free(vb);
    return same;
}

static void test_train_tied_save_load(void)
{
    accel_accelerator_t *acc = NULL, *acc2 = NULL;
    accel_model_t *m = NULL, *m2 = NULL;
    accel_optimizer_t *opt = NULL, *opt2 = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *tokens = stream(400);
    accel_batch_t *b = NULL;
    double first = 0, last = 0, loss = 0;
    size_t nparams = 0, i;
    int steps = 0, epoch;
    char cmd[300];
    const char *name = NULL;

    CHECK_OK(accel_random_set_seed(7, false, false));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_model_get_num_parameters(m, &nparams));
    CHECK(nparams == 2 + 2 * 12 + 2); /* lm_head.weight is transformer.wte.weight, not a parameter */
    for (i = 0; i < nparams; ++i) {
        CHECK_OK(accel_model_get_parameter_name(m, i, &name));
        CHECK(name != NULL && strcmp(name, "lm_head.weight") != 0);
    }
    CHECK(same_tensor(m, "lm_head.weight", "transformer.wte.weight"));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 16, \"batch_size\": 4, \"shuffle\": true,"
                                                         " \"seed\": 3}", &dl));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));
    for (epoch = 0; epoch < 4; ++epoch)
        while (accel_dataloader_next(dl, &b) == ACCEL_OK && b != NULL) {
            CHECK_OK(accel_accelerator_train_step(acc, m, opt, NULL, b, "causal_lm", &loss));
            if (steps == 0) first = loss;
            last = loss;
            ++steps;
            accel_batch_free(b);
        }
    printf("test_gpt: causal_lm loss %.3f -> %.3f over %d steps\n", first, last, steps);
    CHECK(first > 2.5);        /* about log(23) = 3.1 at the start */
    CHECK(last < first - 1.0); /* the stream is learnable */
    CHECK(same_tensor(m, "lm_head.weight", "transformer.wte.weight"));
    /* JSON form of the loss: ignore_index 0 still trains; a bad key is named. */
    CHECK_OK(accel_dataloader_next(dl, &b));
    CHECK_OK(accel_accelerator_train_step(acc, m, opt, NULL, b, "{\"type\": \"causal_lm\", \"ignore_index\": 0}", &loss));
    CHECK(loss > 0 && loss < first);
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, b, "{\"type\": \"causal_lm\", \"ignore\": 0}", &loss),
                ACCEL_ERR_INVALID_ARGUMENT, "loss_name.ignore: unknown key");
    CHECK_FAILS(accel_accelerator_train_step(acc, m, opt, NULL, b, "cross_entropy", &loss), ACCEL_ERR_INVALID_ARGUMENT,
                "targets: cross_entropy needs outputs [N, C]");
    accel_batch_free(b);

    snprintf(cmd, sizeof cmd, "rm -rf gpt_state");
    CHECK(system(cmd) == 0);
    CHECK_OK(accel_accelerator_save_state(acc, "gpt_state"));
    /* A fresh model loads the state: the same values, still one tied tensor. */
    CHECK_OK(accel_accelerator_create(NULL, &acc2));
    CHECK_OK(accel_random_set_seed(99, false, false));
    CHECK_OK(accel_model_create_from_json(kSpec, &m2));
    CHECK_OK(accel_optimizer_create(m2, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt2));
    CHECK_OK(accel_accelerator_prepare(acc2, m2, opt2, NULL, NULL));
    CHECK(max_param_diff(m, m2) > 0.01);
    CHECK_OK(accel_accelerator_load_state(acc2, "gpt_state"));
    CHECK(max_param_diff(m, m2) == 0.0);
    CHECK(same_tensor(m2, "lm_head.weight", "transformer.wte.weight"));
    {
        /* A step after loading keeps them tied, and equal to the first model's step. */
        accel_tensor_t *t2 = stream(17);
        accel_dataloader_t *one = NULL;
        CHECK_OK(accel_dataloader_create_from_tokens(t2, "{\"block_size\": 16}", &one));
        CHECK_OK(accel_dataloader_next(one, &b));
        CHECK_OK(accel_accelerator_train_step(acc, m, opt, NULL, b, "causal_lm", &first));
        CHECK_OK(accel_accelerator_train_step(acc2, m2, opt2, NULL, b, "causal_lm", &last));
        CHECK(first == last);
        CHECK(max_param_diff(m, m2) == 0.0);
        CHECK(same_tensor(m2, "lm_head.weight", "transformer.wte.weight"));
        accel_batch_free(b);
        accel_dataloader_free(one);
        accel_tensor_free(t2);
    }
    accel_optimizer_free(opt2);
    accel_model_free(m2);
    accel_accelerator_free(acc2);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    accel_tensor_free(tokens);
}

static void generate(accel_model_t *m, const char *options, int64_t *out, size_t n)
{
    int64_t prompt[3] = {1, 4, 7}, len = 3;
    accel_tensor_t *p = tensor_i64(prompt, &len, 1), *o = NULL;
    memset(out, 0, n * sizeof(int64_t));
    CHECK_OK(accel_model_generate(m, p, options, &o));
    CHECK(numel_of(o) == (int64_t)n);
    if (numel_of(o) == (int64_t)n) CHECK_OK(accel_tensor_copy_to_buffer(o, out, n * sizeof(int64_t)));
    accel_tensor_free(o);
    accel_tensor_free(p);
}

/* A file named for another architecture (Llama's names) loads without strict: what did not match is reported,
 * and "lm_head.weight", which a GPT ties to its token embedding, is reported as loaded into that tensor (issue
 * 43.3: it silently replaced the embedding). Strict names the keys. */
static void test_load_checkpoint_report(void)
{
    accel_model_t *m = NULL;
    char *report = NULL;
    const char *path = "llama_named.safetensors";
    const char *head = "{\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[23,16],\"data_offsets\":[0,1472]},"
                       "\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[23,16],\"data_offsets\":[1472,2944]}}";
    float values[2 * 23 * 16];
    size_t i, hlen = strlen(head), padded = (hlen + 7) / 8 * 8;
    uint64_t n = padded;
    FILE *f = fopen(path, "wb");
    for (i = 0; i < 2 * 23 * 16; ++i) values[i] = i < 23 * 16 ? 0.5f : 0.25f;
    CHECK(f != NULL);
    if (f == NULL) return;
    CHECK(fwrite(&n, 8, 1, f) == 1 && fwrite(head, 1, hlen, f) == hlen);
    for (i = hlen; i < padded; ++i) CHECK(fputc(' ', f) == ' ');
    CHECK(fwrite(values, sizeof values, 1, f) == 1);
    fclose(f);
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_FAILS(accel_model_load_checkpoint(m, path, "{\"strict\": true}"), ACCEL_ERR_INVALID_ARGUMENT,
                "unexpected keys: model.embed_tokens.weight");
    CHECK_OK(accel_model_load_checkpoint_with_report(m, path, NULL, &report));
    CHECK(report != NULL && strstr(report, "\"unexpected_keys\": [\"model.embed_tokens.weight\"]") != NULL);
    CHECK(report != NULL && strstr(report, "{\"key\": \"lm_head.weight\", \"loaded_into\": \"transformer.wte.weight\"}") != NULL);
    CHECK(report != NULL && strstr(report, "\"transformer.wpe.weight\"") != NULL); /* missing */
    if (report != NULL) printf("test_gpt: load report %.160s...\n", report);
    accel_string_free(report);
    CHECK_FAILS(accel_model_load_checkpoint_with_report(m, path, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out_report");
    accel_model_free(m);
    remove(path);
}

static void test_generate(void)
{
    accel_model_t *m = NULL, *mlp = NULL;
    accel_tensor_t *p = NULL, *o = NULL;
    int64_t a[13], b[13], c[13], prompt[2] = {1, 2}, shape2[2] = {1, 2}, len = 2;
    bool training = false;
    size_t i;
    int differs = 0;
    CHECK_OK(accel_random_set_seed(5, false, false));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));

    generate(m, "{\"max_new_tokens\": 10}", a, 13);
    generate(m, "{\"max_new_tokens\": 10, \"use_cache\": false}", b, 13);
    CHECK(memcmp(a, b, sizeof a) == 0); /* greedy: the KV cache changes nothing */
    CHECK(a[0] == 1 && a[1] == 4 && a[2] == 7);
    for (i = 3; i < 13; ++i) CHECK(a[i] >= 0 && a[i] < 23);

    generate(m, "{\"max_new_tokens\": 10, \"do_sample\": true, \"top_k\": 5, \"temperature\": 2.0, \"seed\": 11}", a, 13);
    generate(m, "{\"max_new_tokens\": 10, \"do_sample\": true, \"top_k\": 5, \"temperature\": 2.0, \"seed\": 11}", b, 13);
    generate(m, "{\"max_new_tokens\": 10, \"do_sample\": true, \"top_k\": 5, \"temperature\": 2.0, \"seed\": 12}", c, 13);
    CHECK(memcmp(a, b, sizeof a) == 0); /* same seed, same text */
    for (i = 3; i < 13; ++i) differs |= a[i] != c[i];
    CHECK(differs);
    /* eos: the row stops; here every row has finished at once. */
    generate(m, "{\"max_new_tokens\": 10}", a, 13);
    {
        char opts[100];
        int64_t e[4];
        snprintf(opts, sizeof opts, "{\"max_new_tokens\": 10, \"eos_token_id\": %lld}", (long long)a[3]);
        generate(m, opts, e, 4);
        CHECK(e[3] == a[3]);
    }
    CHECK_OK(accel_model_is_training(m, &training));
    CHECK(training); /* generation left the mode alone */

    p = tensor_i64(prompt, shape2, 2);
    CHECK_FAILS(accel_model_generate(m, p, "{\"max_new_tokens\": 15}", &o), ACCEL_ERR_INVALID_ARGUMENT,
                "max_new_tokens: 2 prompt tokens + 15 new ones exceed n_positions 16");
    CHECK(o == NULL);
    CHECK_FAILS(accel_model_generate(m, p, "{\"top_p\": 0.9}", &o), ACCEL_ERR_INVALID_ARGUMENT, "top_p: unknown key");
    CHECK_FAILS(accel_model_generate(m, p, "{\"temperature\": 0}", &o), ACCEL_ERR_INVALID_ARGUMENT, "temperature:");
    CHECK_FAILS(accel_model_generate(m, p, "{\"eos_token_id\": 23, \"max_new_tokens\": 3}", &o), ACCEL_ERR_INVALID_ARGUMENT,
                "eos_token_id: 23 is not below vocab_size 23");
    CHECK_FAILS(accel_model_generate(m, NULL, NULL, &o), ACCEL_ERR_INVALID_ARGUMENT, "input_ids");
    CHECK_OK(accel_model_generate(m, p, "{\"max_new_tokens\": 1}", &o));
    CHECK(shape2_is(o, 1, 3));
    accel_tensor_free(o);
    o = NULL;
    accel_tensor_free(p);
    prompt[1] = 23;
    p = tensor_i64(prompt, &len, 1);
    CHECK_FAILS(accel_model_generate(m, p, "{\"max_new_tokens\": 3}", &o), ACCEL_ERR_OUT_OF_RANGE,
                "token id 23 is outside [0, 23)");
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 3]}", &mlp));
    CHECK_FAILS(accel_model_generate(mlp, p, NULL, &o), ACCEL_ERR_UNIMPLEMENTED, "type \"gpt\"");
    accel_tensor_free(p);
    accel_model_free(mlp);
    accel_model_free(m);
}

static void test_bad_spec(void)
{
    accel_model_t *m = NULL;
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"n_embed\": 8}", &m), ACCEL_ERR_INVALID_ARGUMENT,
                "n_embed: unknown key");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"n_embd\": 8, \"n_head\": 3}", &m),
                ACCEL_ERR_INVALID_ARGUMENT, "n_head: must divide n_embd (8), got 3");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"attn_pdrop\": -0.1}", &m),
                ACCEL_ERR_INVALID_ARGUMENT, "attn_pdrop:");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"n_layer\": 1.5}", &m), ACCEL_ERR_INVALID_ARGUMENT,
                "n_layer:");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"layers\": []}", &m), ACCEL_ERR_INVALID_ARGUMENT,
                "layers: unknown key");
    /* Sizes checked before LibTorch allocates: an overflowing byte count, then more than memory and swap. */
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"n_embd\": 2147483648, \"n_head\": 1}", &m),
                ACCEL_ERR_INVALID_ARGUMENT, "vocab_size, n_positions, n_embd, n_layer, n_inner:");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"n_embd\": 1048576, \"n_head\": 1}", &m),
                ACCEL_ERR_RESOURCE_EXHAUSTED, "more than this machine's memory and swap");
    CHECK(m == NULL);
}

/* ---- the reference file ------------------------------------------------------------------------ */

static int test_reference(void)
{
    const char *py = getenv("ACCEL_PYTHON"), *script = getenv("ACCEL_GPT_REFERENCE");
    char cmd[1200];
    accel_model_t *m = NULL;
    accel_accelerator_t *acc = NULL;
    double worst;
    if (py == NULL || py[0] == '\0' || script == NULL) {
        fprintf(stderr, "test_gpt reference: ACCEL_PYTHON (with torch) and ACCEL_GPT_REFERENCE must be set\n");
        return 1;
    }
    CHECK(system("rm -rf gpt_saved") == 0);
    if (gpt_reference_write(py, script, "gpt_ref") != 0) return capi_report("test_gpt reference");

    CHECK_OK(accel_model_create_from_json("{\"type\": \"gpt\", \"vocab_size\": 61, \"n_positions\": 16, \"n_embd\": 32,"
                                          " \"n_layer\": 2, \"n_head\": 4}", &m));
    CHECK_OK(accel_model_eval(m));
    /* The folder form (model.safetensors inside) and strict keys: the file has no lm_head.weight. */
    CHECK_OK(accel_model_load_checkpoint(m, "gpt_ref", "{\"strict\": true}"));
    worst = gpt_reference_logits_diff(m, "gpt_ref");
    printf("test_gpt: max |logit - reference| = %.3g\n", worst);
    CHECK(worst <= 1e-5);
    /* save_model writes HF's layout back (Python checks keys, shapes, dtypes and values). */
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_accelerator_save_model(acc, m, "gpt_saved", NULL));
    snprintf(cmd, sizeof cmd, "'%s' '%s' check gpt_saved", py, script);
    CHECK(system(cmd) == 0);
    accel_model_free(m);
    accel_accelerator_free(acc);
    return capi_report("test_gpt reference");
}

/* Three ZeRO-3 steps of the GPT with `zero` as hf_ds_config's zero_optimization: the memory statistics, and
 * every weight (gathered) appended to `w` (room for `cap` floats; returns how many). */
static size_t zero3_steps(const char *zero, char **stats, float *w, size_t cap)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *tokens = stream(200);
    accel_batch_t *b = NULL;
    char config[512];
    double loss = 0;
    size_t n;
    int step;
    /* (on the CPU: sharded training is not placed on GPUs yet) */
    snprintf(config, sizeof config, "{\"cpu\": true, \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": %s}}}",
             zero);
    CHECK_OK(accel_random_set_seed(11, false, false));
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 16, \"batch_size\": 4}", &dl));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));
    for (step = 0; step < 3 && accel_dataloader_next(dl, &b) == ACCEL_OK && b != NULL; ++step) {
        CHECK_OK(accel_accelerator_train_step(acc, m, opt, NULL, b, "causal_lm", &loss));
        accel_batch_free(b);
    }
    CHECK_OK(accel_accelerator_get_memory_stats_json(acc, stats));
    CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    n = read_params_f32(m, w, cap);
    CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(tokens);
    accel_accelerator_free(acc);
    return n;
}

/* hf_ds_config's "auto" sizes are filled as Accelerate fills them from the hidden size (n_embd 16):
 * reduce_bucket_size 256, stage3_prefetch_bucket_size 230, stage3_param_persistence_threshold 160. "auto" trains
 * with the collectives and weights of those numbers given, and with other collectives than DeepSpeed's defaults
 * (the sizes absent: the model in one gather and one reduction per step). */
static void test_deepspeed_auto_sizes(void)
{
    enum { CAP = 16384 };
    static float ref[CAP], got[CAP];
    char *given = NULL, *automatic = NULL, *absent = NULL;
    char counts[96] = "";
    const char *c;
    size_t n = zero3_steps("{\"stage\": 3, \"reduce_bucket_size\": 256, \"stage3_prefetch_bucket_size\": 230, "
                           "\"stage3_param_persistence_threshold\": 160}", &given, ref, CAP);
    CHECK(n > 0 && n <= CAP);
    CHECK(zero3_steps("{\"stage\": 3, \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\", "
                      "\"stage3_param_persistence_threshold\": \"auto\"}", &automatic, got, CAP) == n);
    CHECK(memcmp(ref, got, n * sizeof(float)) == 0);
    /* "all_gathers": A, "gradient_reductions": B} of the sizes given */
    c = given ? strstr(given, "\"all_gathers\"") : NULL;
    if (c != NULL && strchr(c, '}') != NULL) snprintf(counts, sizeof counts, "%.*s", (int)(strchr(c, '}') - c + 1), c);
    CHECK(counts[0] != '\0' && automatic != NULL && strstr(automatic, counts) != NULL);
    CHECK(zero3_steps("{\"stage\": 3}", &absent, got, CAP) == n);
    CHECK(absent != NULL && strstr(absent, "\"all_gathers\": 3, \"gradient_reductions\": 3}") != NULL);
    CHECK(absent != NULL && strstr(absent, counts) == NULL);
    printf("test_gpt: ZeRO-3 sizes from the hidden size: %s over 3 steps\n", counts);
    accel_string_free(given);
    accel_string_free(automatic);
    accel_string_free(absent);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "reference") == 0) return test_reference();
    test_bad_spec();
    test_token_loader();
    test_train_tied_save_load();
    test_generate();
    test_load_checkpoint_report();
    test_deepspeed_auto_sizes();
    return capi_report("test_gpt");
}
