/* The "llama" model through the C API. Without arguments: its keys (unknown ones and unsupported values refused by
 * name, config.json's inert keys accepted), Hugging Face's parameter names, greedy generation with and without the
 * KV cache, activation checkpointing training like the plain forward, bf16 mixed precision.
 * With "reference DIR" it is the accel side of tests/capi/llama_check.py: DIR holds spec.json, an HF folder
 * written by tests/python/llama_reference.py, ids.bin / labels.bin (int64 [B, T]) and params.txt ("B T new_tokens
 * steps lr"); it writes accel_logits.bin (float32 [B, T, V]), accel_gen_cache.bin / accel_gen_nocache.bin (int64
 * [B, T + new_tokens]), accel_losses.bin (float64 [steps]) and the trained weights (save_model) in DIR/accel_out.
 * With "bf16 DIR" (a bfloat16 folder) it writes the logits and greedy tokens of the model computing in bfloat16. */
#include "capi_helpers.h"

static const char *kSmall = "{\"type\": \"llama\", \"vocab_size\": 29, \"hidden_size\": 16, \"intermediate_size\": 24,"
                            " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                            " \"initializer_range\": 0.3}";

static void refused(const char *spec, accel_status_t code, const char *needle)
{
    accel_model_t *m = NULL;
    CHECK_FAILS(accel_model_create_from_json(spec, &m), code, needle);
    CHECK(m == NULL);
    accel_model_free(m);
}

static void test_keys(void)
{
    accel_model_t *m = NULL;
    /* A config.json as transformers writes it (Llama 3 style), with "type" added. */
    CHECK_OK(accel_model_create_from_json(
        "{\"type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
        " \"attention_dropout\": 0.0, \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008],"
        " \"hidden_act\": \"silu\", \"hidden_size\": 16, \"initializer_range\": 0.02, \"intermediate_size\": 24,"
        " \"max_position_embeddings\": 64, \"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 4,"
        " \"num_hidden_layers\": 1, \"num_key_value_heads\": 1, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
        " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
        " \"original_max_position_embeddings\": 16, \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.0\","
        " \"use_cache\": true, \"vocab_size\": 40, \"head_dim\": null, \"pad_token_id\": null,"
        " \"_name_or_path\": \"x\"}", &m));
    accel_model_free(m);
    m = NULL;
    /* Qwen2's config: its sliding_window is inert while use_sliding_window is false. */
    CHECK_OK(accel_model_create_from_json(
        "{\"type\": \"llama\", \"model_type\": \"qwen2\", \"vocab_size\": 40, \"hidden_size\": 16, \"intermediate_size\": 24,"
        " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"sliding_window\": 131072,"
        " \"use_sliding_window\": false, \"max_window_layers\": 21, \"rope_scaling\": null}", &m));
    accel_model_free(m);
    m = NULL;
    refused("{\"type\": \"llama\", \"hidden_sizes\": 16}", ACCEL_ERR_INVALID_ARGUMENT, "hidden_sizes: unknown key");
    refused("{\"type\": \"llama\", \"model_type\": \"gemma\"}", ACCEL_ERR_INVALID_ARGUMENT, "model_type:");
    refused("{\"type\": \"llama\", \"hidden_size\": 16, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
            ACCEL_ERR_INVALID_ARGUMENT, "num_key_value_heads: must divide num_attention_heads (4), got 3");
    refused("{\"type\": \"llama\", \"hidden_size\": 18, \"num_attention_heads\": 4}", ACCEL_ERR_INVALID_ARGUMENT,
            "num_attention_heads: must divide hidden_size (18)");
    refused("{\"type\": \"llama\", \"hidden_size\": 16, \"num_attention_heads\": 4, \"head_dim\": 5}",
            ACCEL_ERR_INVALID_ARGUMENT, "head_dim: must be even");
    refused("{\"type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", ACCEL_ERR_UNIMPLEMENTED,
            "rope_scaling.rope_type: \"yarn\" is not supported");
    refused("{\"type\": \"llama\", \"rope_scaling\": {\"type\": \"linear\"}}", ACCEL_ERR_INVALID_ARGUMENT,
            "rope_scaling.factor: required for \"linear\"");
    refused("{\"type\": \"llama\", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0, \"alpha\": 1}}",
            ACCEL_ERR_INVALID_ARGUMENT, "rope_scaling.alpha: unknown key");
    refused("{\"type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
            " \"high_freq_factor\": 4.0}}", ACCEL_ERR_INVALID_ARGUMENT,
            "rope_scaling.original_max_position_embeddings: required for \"llama3\"");
    /* transformers 5's form: rope_parameters holds theta and the scaling; layer_types lists each layer's attention. */
    CHECK_OK(accel_model_create_from_json(
        "{\"type\": \"llama\", \"model_type\": \"qwen2\", \"vocab_size\": 40, \"hidden_size\": 16, \"intermediate_size\": 24,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"sliding_window\": 4,"
        " \"use_sliding_window\": true, \"max_window_layers\": 1, \"layer_types\": [\"full_attention\", \"sliding_attention\"],"
        " \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
        " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16}, \"dtype\": \"float32\"}", &m));
    accel_model_free(m);
    m = NULL;
    refused("{\"type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 1e4, \"factor\": 4.0}}",
            ACCEL_ERR_UNIMPLEMENTED, "rope_parameters.rope_type: \"yarn\" is not supported");
    refused("{\"type\": \"llama\", \"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5e5}}",
            ACCEL_ERR_INVALID_ARGUMENT, "rope_theta: differs from rope_parameters.rope_theta");
    refused("{\"type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}}",
            ACCEL_ERR_INVALID_ARGUMENT, "rope_parameters.partial_rotary_factor: unknown key");
    refused("{\"type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0},"
            " \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}",
            ACCEL_ERR_INVALID_ARGUMENT, "rope_scaling: differs from rope_parameters");
    refused("{\"type\": \"llama\", \"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\"]}",
            ACCEL_ERR_INVALID_ARGUMENT, "layer_types: 1 entries for 2 layers");
    refused("{\"type\": \"llama\", \"num_hidden_layers\": 1, \"layer_types\": [\"sliding_attention\"]}",
            ACCEL_ERR_UNIMPLEMENTED, "layer_types[0]: \"sliding_attention\" where the sliding-window keys give \"full_attention\"");
    refused("{\"type\": \"llama\", \"sliding_window\": 4096}", ACCEL_ERR_INVALID_ARGUMENT,
            "sliding_window: model_type \"llama\" has no sliding window");
    refused("{\"type\": \"llama\", \"model_type\": \"mistral\", \"attention_bias\": true}", ACCEL_ERR_INVALID_ARGUMENT,
            "attention_bias: model_type \"mistral\" has no attention_bias");
    refused("{\"type\": \"llama\", \"pretraining_tp\": 2}", ACCEL_ERR_UNIMPLEMENTED, "pretraining_tp: only 1");
    refused("{\"type\": \"llama\", \"hidden_act\": \"gelu_fast\"}", ACCEL_ERR_INVALID_ARGUMENT, "hidden_act:");
    refused("{\"type\": \"llama\", \"vocab_size\": 10, \"pad_token_id\": 10}", ACCEL_ERR_INVALID_ARGUMENT, "pad_token_id:");
    refused("{\"type\": \"llama\", \"vocab_size\": 2147483648, \"hidden_size\": 2147483648, \"num_attention_heads\": 1}",
            ACCEL_ERR_INVALID_ARGUMENT, "vocab_size, hidden_size");
}

static int has_name(const accel_model_t *m, const char *want)
{
    size_t n = 0, i;
    const char *name = NULL;
    if (accel_model_get_num_parameters(m, &n) != ACCEL_OK) return 0;
    for (i = 0; i < n; ++i)
        if (accel_model_get_parameter_name(m, i, &name) == ACCEL_OK && strcmp(name, want) == 0) return 1;
    return 0;
}

static void test_names(void)
{
    accel_model_t *m = NULL;
    size_t n = 0;
    CHECK_OK(accel_model_create_from_json(
        "{\"type\": \"llama\", \"model_type\": \"qwen2\", \"vocab_size\": 29, \"hidden_size\": 16, \"intermediate_size\": 24,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"tie_word_embeddings\": true}",
        &m));
    CHECK_OK(accel_model_get_num_parameters(m, &n));
    CHECK(n == 1 + 2 * 12 + 1); /* embed; per layer q/k/v weight+bias, o, gate, up, down, two norms; norm */
    CHECK(has_name(m, "model.embed_tokens.weight"));
    CHECK(has_name(m, "model.layers.1.self_attn.q_proj.bias"));
    CHECK(!has_name(m, "model.layers.1.self_attn.o_proj.bias"));
    CHECK(has_name(m, "model.layers.0.mlp.down_proj.weight"));
    CHECK(has_name(m, "model.layers.1.post_attention_layernorm.weight"));
    CHECK(has_name(m, "model.norm.weight"));
    CHECK(!has_name(m, "lm_head.weight")); /* tied: the embedding, which "lm_head.weight" also names */
    {
        size_t k1 = 0, k2 = 0;
        float *x = model_tensor_f32(m, "lm_head.weight", &k1), *y = model_tensor_f32(m, "model.embed_tokens.weight", &k2);
        CHECK(x != NULL && y != NULL && k1 == 29 * 16 && k1 == k2 && memcmp(x, y, k1 * sizeof(float)) == 0);
        free(x);
        free(y);
    }
    accel_model_free(m);
    m = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"llama\", \"vocab_size\": 29, \"hidden_size\": 16,"
                                          " \"intermediate_size\": 24, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
                                          " \"attention_bias\": true, \"mlp_bias\": true}", &m));
    CHECK_OK(accel_model_get_num_parameters(m, &n));
    CHECK(n == 1 + 16 + 1 + 1); /* + lm_head */
    CHECK(has_name(m, "model.layers.0.self_attn.o_proj.bias") && has_name(m, "model.layers.0.mlp.up_proj.bias"));
    CHECK(has_name(m, "lm_head.weight"));
    accel_model_free(m);
}

/* Standard deviation of a model tensor's values (-1 when unreadable). */
static double std_of(const accel_model_t *m, const char *name)
{
    size_t n = 0, i;
    float *v = model_tensor_f32(m, name, &n);
    double sum = 0, sq = 0;
    for (i = 0; i < n; ++i) sum += v[i], sq += (double)v[i] * v[i];
    free(v);
    return n > 1 ? sqrt(sq / (double)n - (sum / (double)n) * (sum / (double)n)) : -1;
}

/* transformers' _init_weights: N(0, initializer_range) weights, zero biases, unit norms, a zero padding row. */
static void test_init(void)
{
    accel_model_t *m = NULL;
    size_t n = 0, i;
    float *v;
    int ok = 1;
    CHECK_OK(accel_random_set_seed(3, false, false));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64,"
                                          " \"intermediate_size\": 96, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"
                                          " \"attention_bias\": true, \"initializer_range\": 0.05, \"pad_token_id\": 7}", &m));
    CHECK(fabs(std_of(m, "model.embed_tokens.weight") - 0.05) < 0.003);
    CHECK(fabs(std_of(m, "model.layers.0.self_attn.q_proj.weight") - 0.05) < 0.005);
    CHECK(fabs(std_of(m, "model.layers.0.mlp.down_proj.weight") - 0.05) < 0.005);
    CHECK(fabs(std_of(m, "lm_head.weight") - 0.05) < 0.003);
    v = model_tensor_f32(m, "model.embed_tokens.weight", &n);
    for (i = 7 * 64; v != NULL && i < 8 * 64; ++i) ok &= v[i] == 0.0f;
    CHECK(v != NULL && n == 300 * 64 && ok);
    free(v);
    v = model_tensor_f32(m, "model.layers.0.self_attn.o_proj.bias", &n);
    for (i = 0, ok = 1; v != NULL && i < n; ++i) ok &= v[i] == 0.0f;
    CHECK(v != NULL && n == 64 && ok);
    free(v);
    v = model_tensor_f32(m, "model.layers.0.post_attention_layernorm.weight", &n);
    for (i = 0, ok = 1; v != NULL && i < n; ++i) ok &= v[i] == 1.0f;
    CHECK(v != NULL && n == 64 && ok);
    free(v);
    accel_model_free(m);
}

/* Greedy tokens of `spec` (seeded weights) for a fixed prompt, with or without the cache. */
static void greedy(const char *spec, bool use_cache, int64_t *out, size_t n)
{
    accel_model_t *m = NULL;
    accel_tensor_t *p = NULL, *o = NULL;
    int64_t prompt[6] = {3, 1, 4, 1, 5, 9}, shape[2] = {2, 3};
    char options[80];
    CHECK_OK(accel_random_set_seed(11, false, false));
    CHECK_OK(accel_model_create_from_json(spec, &m));
    p = tensor_i64(prompt, shape, 2);
    snprintf(options, sizeof options, "{\"max_new_tokens\": %d, \"use_cache\": %s}", (int)(n / 2 - 3),
             use_cache ? "true" : "false");
    CHECK_OK(accel_model_generate(m, p, options, &o));
    CHECK(numel_of(o) == (int64_t)n);
    if (numel_of(o) == (int64_t)n) CHECK_OK(accel_tensor_copy_to_buffer(o, out, n * sizeof(int64_t)));
    accel_tensor_free(o);
    accel_tensor_free(p);
    accel_model_free(m);
}

static void test_generation(void)
{
    enum { N = 2 * (3 + 12) };
    int64_t a[N], b[N];
    int i, distinct = 0;
    memset(a, 0, sizeof a);
    memset(b, 0xff, sizeof b);
    greedy(kSmall, true, a, N);
    greedy(kSmall, false, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    for (i = 4; i < N; ++i) distinct += a[i] != a[i - 1];
    CHECK(distinct > 3); /* not one token repeated: the test can tell a broken cache */
    CHECK(a[0] == 3 && a[15] == 1);
}

/* Loss after `steps` SGD steps on a fixed batch, with or without activation checkpointing, under `config`. */
static double train_loss_with(bool checkpointing, int steps, const char *config)
{
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_accelerator_t *acc = NULL;
    accel_tensor_t *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    int64_t ids[16], labels[16], shape[2] = {2, 8};
    double value = -1;
    char spec[400];
    int i;
    for (i = 0; i < 16; ++i) ids[i] = (7 * i + 3) % 29, labels[i] = (7 * i + 10) % 29;
    snprintf(spec, sizeof spec, "%.*s, \"activation_checkpointing\": %s}", (int)strlen(kSmall) - 1, kSmall,
             checkpointing ? "true" : "false");
    CHECK_OK(accel_random_set_seed(5, false, false));
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(spec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    x = tensor_i64(ids, shape, 2);
    y = tensor_i64(labels, shape, 2);
    for (i = 0; i < steps; ++i) {
        CHECK_OK(accel_model_forward(m, x, &out));
        CHECK_OK(accel_loss_compute("causal_lm", out, y, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        CHECK_OK(accel_tensor_get_item(loss, &value));
        accel_tensor_free(out);
        accel_tensor_free(loss);
        out = loss = NULL;
    }
    accel_tensor_free(x);
    accel_tensor_free(y);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    return value;
}

static double train_loss(bool checkpointing, int steps) { return train_loss_with(checkpointing, steps, NULL); }

static void test_checkpointing(void)
{
    double plain = train_loss(false, 4), recomputed = train_loss(true, 4), first = train_loss(false, 1);
    printf("test_llama: loss %.6f -> %.6f after 4 SGD steps (checkpointed %.6f)\n", first, plain, recomputed);
    CHECK(plain == recomputed);
    CHECK(plain < first);
}

/* bf16 mixed precision (autocast: the projections in bf16, RMSNorm and softmax in float32): close to float32, not
 * equal (so autocast did apply). */
static void test_bf16(void)
{
    const char *bf16 = "{\"mixed_precision\": \"bf16\"}";
    double fp32 = train_loss(false, 4), mixed = train_loss_with(false, 4, bf16), mixed_ckpt = train_loss_with(true, 4, bf16);
    printf("test_llama: bf16 loss after 4 steps %.6f (float32 %.6f, bf16 checkpointed %.6f)\n", mixed, fp32, mixed_ckpt);
    CHECK(mixed == mixed); /* not NaN */
    CHECK(fabs(mixed - fp32) < 0.05 && mixed != fp32);
    CHECK(mixed_ckpt == mixed);
}

/* ---- the accel side of llama_check.py ---------------------------------------------------------------------- */

static void write_tensor(const char *dir, const char *name, const accel_tensor_t *t, size_t bytes)
{
    void *buf = malloc(bytes);
    if (accel_tensor_copy_to_buffer(t, buf, bytes) == ACCEL_OK) write_file(dir, name, buf, bytes);
    else CHECK(0);
    free(buf);
}

static int reference(const char *dir)
{
    static char spec[1 << 16];
    char path[1024], params[200];
    long B = 0, T = 0, new_tokens = 0, steps = 0, n;
    double lr = 0, losses[64];
    int64_t *ids, *labels, shape[2];
    int64_t V;
    accel_model_t *m = NULL;
    accel_accelerator_t *acc = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    char options[100];
    int i, cached;

    snprintf(path, sizeof path, "%s/spec.json", dir);
    n = read_file(path, spec, sizeof spec - 1);
    CHECK(n > 0);
    spec[n > 0 ? n : 0] = '\0';
    snprintf(path, sizeof path, "%s/params.txt", dir);
    n = read_file(path, params, sizeof params - 1);
    params[n > 0 ? n : 0] = '\0';
    CHECK(sscanf(params, "%ld %ld %ld %ld %lf", &B, &T, &new_tokens, &steps, &lr) == 5 && steps <= 64);
    if (capi_failures) return capi_report("test_llama reference");
    ids = (int64_t *)calloc((size_t)(B * T), sizeof(int64_t));
    labels = (int64_t *)calloc((size_t)(B * T), sizeof(int64_t));
    snprintf(path, sizeof path, "%s/ids.bin", dir);
    CHECK(read_file(path, ids, (size_t)(B * T) * 8) == B * T * 8);
    snprintf(path, sizeof path, "%s/labels.bin", dir);
    CHECK(read_file(path, labels, (size_t)(B * T) * 8) == B * T * 8);
    shape[0] = B;
    shape[1] = T;
    x = tensor_i64(ids, shape, 2);
    y = tensor_i64(labels, shape, 2);

    /* Logits of the folder's weights (strict: exactly the model's keys). */
    CHECK_OK(accel_model_create_from_json(spec, &m));
    CHECK_OK(accel_model_load_checkpoint(m, dir, "{\"strict\": true}"));
    CHECK_OK(accel_model_forward_no_grad(m, x, &out));
    V = numel_of(out) / (B * T);
    write_tensor(dir, "accel_logits.bin", out, (size_t)(B * T * V) * sizeof(float));
    accel_tensor_free(out);
    out = NULL;
    /* Greedy generation, with and without the cache. */
    for (cached = 1; cached >= 0; --cached) {
        snprintf(options, sizeof options, "{\"max_new_tokens\": %ld, \"use_cache\": %s}", new_tokens,
                 cached ? "true" : "false");
        CHECK_OK(accel_model_generate(m, x, options, &out));
        CHECK(numel_of(out) == B * (T + new_tokens));
        if (numel_of(out) == B * (T + new_tokens))
            write_tensor(dir, cached ? "accel_gen_cache.bin" : "accel_gen_nocache.bin", out,
                         (size_t)(B * (T + new_tokens)) * sizeof(int64_t));
        accel_tensor_free(out);
        out = NULL;
    }
    /* A plain training loop: SGD steps on the same batch. */
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    snprintf(options, sizeof options, "{\"type\": \"sgd\", \"lr\": %.17g}", lr);
    CHECK_OK(accel_optimizer_create(m, options, &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    for (i = 0; i < steps; ++i) {
        CHECK_OK(accel_model_forward(m, x, &out));
        CHECK_OK(accel_loss_compute("causal_lm", out, y, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        CHECK_OK(accel_tensor_get_item(loss, &losses[i]));
        accel_tensor_free(out);
        accel_tensor_free(loss);
        out = loss = NULL;
    }
    write_file(dir, "accel_losses.bin", losses, (size_t)steps * sizeof(double));
    snprintf(path, sizeof path, "%s/accel_out", dir);
    CHECK_OK(accel_accelerator_save_model(acc, m, path, NULL));
    accel_tensor_free(x);
    accel_tensor_free(y);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    free(ids);
    free(labels);
    return capi_report("test_llama reference");
}

/* "bf16 DIR": DIR is a bfloat16 folder; from_pretrained keeps the stored dtype, so the model computes in bfloat16:
 * its logits (raw bfloat16 [B, T, V]) go to accel_logits_bf16.bin and its greedy tokens (with the cache) to
 * accel_gen_bf16.bin, for llama_check.py to compare with the reference computing in bfloat16. */
static int bf16(const char *dir)
{
    char path[1024], params[200];
    long B = 0, T = 0, new_tokens = 0, steps = 0, n;
    double lr = 0;
    int64_t ids[4096], shape[2];
    accel_model_t *m = NULL;
    accel_tensor_t *x = NULL, *out = NULL;
    accel_dtype_t dtype = 0;
    char options[100];
    snprintf(path, sizeof path, "%s/params.txt", dir);
    n = read_file(path, params, sizeof params - 1);
    params[n > 0 ? n : 0] = '\0';
    CHECK(sscanf(params, "%ld %ld %ld %ld %lf", &B, &T, &new_tokens, &steps, &lr) == 5 && B * T <= 4096);
    if (capi_failures) return capi_report("test_llama bf16");
    snprintf(path, sizeof path, "%s/ids.bin", dir);
    CHECK(read_file(path, ids, sizeof ids) == B * T * 8);
    shape[0] = B;
    shape[1] = T;
    x = tensor_i64(ids, shape, 2);
    CHECK_OK(accel_model_from_pretrained(dir, NULL, &m));
    CHECK_OK(accel_model_forward_no_grad(m, x, &out));
    CHECK_OK(accel_tensor_get_dtype(out, &dtype));
    CHECK(dtype == ACCEL_DTYPE_BFLOAT16);
    write_tensor(dir, "accel_logits_bf16.bin", out, (size_t)numel_of(out) * 2);
    accel_tensor_free(out);
    out = NULL;
    snprintf(options, sizeof options, "{\"max_new_tokens\": %ld}", new_tokens);
    CHECK_OK(accel_model_generate(m, x, options, &out));
    CHECK(numel_of(out) == B * (T + new_tokens));
    if (numel_of(out) == B * (T + new_tokens))
        write_tensor(dir, "accel_gen_bf16.bin", out, (size_t)(B * (T + new_tokens)) * sizeof(int64_t));
    accel_tensor_free(out);
    accel_tensor_free(x);
    accel_model_free(m);
    return capi_report("test_llama bf16");
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "reference") == 0) return reference(argv[2]);
    if (argc > 2 && strcmp(argv[1], "bf16") == 0) return bf16(argv[2]);
    test_keys();
    test_names();
    test_init();
    test_generation();
    test_checkpointing();
    test_bf16();
    return capi_report("test_llama");
}
