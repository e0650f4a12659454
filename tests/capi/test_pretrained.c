#define _XOPEN_SOURCE 700 /* truncate() */
/* Hugging Face folders through the C API: accel_model_save_pretrained -> accel_model_from_pretrained round trips
 * bit for bit (one file, shards with an index, pytorch_model.bin, bfloat16 kept as stored, a prepared model),
 * and every refusal has a status and a message naming what is wrong (the tensor and its file for mismatches).
 * With the argument "reference" (needs Python's torch): the folder tests/capi/gpt_reference.py writes loads and
 * gives the GPT-2 equations' logits, and the folder save_pretrained writes is GPT2LMHeadModel's. */
#include "capi_helpers.h"

#include <sys/stat.h>
#include <unistd.h>

static const char *kSpec = "{\"type\": \"gpt\", \"vocab_size\": 23, \"n_positions\": 16, \"n_embd\": 16,"
                           " \"n_layer\": 2, \"n_head\": 2, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0,"
                           " \"attn_pdrop\": 0.0}";

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f == NULL) return;
    fputs(text, f);
    fclose(f);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* config.json of the GPT-2 layout with the given sizes (as transformers writes it, with keys accel ignores). */
static void write_gpt2_config(const char *dir, int n_layer, int n_positions, const char *extra)
{
    char path[256], text[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(text, sizeof text,
             "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], \"vocab_size\": 23,"
             " \"n_positions\": %d, \"n_ctx\": %d, \"n_embd\": 16, \"n_layer\": %d, \"n_head\": 2,"
             " \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0, \"bos_token_id\": 0,"
             " \"eos_token_id\": 0, \"summary_type\": \"cls_index\", \"transformers_version\": \"4.46.0\"%s}",
             n_positions, n_positions, n_layer, extra);
    write_text(path, text);
}

/* Whether every parameter of `a` and `b` has the same name, dtype and bytes. */
static int same_parameters(const accel_model_t *a, const accel_model_t *b)
{
    size_t na = 0, nb = 0, k;
    int same = 1;
    CHECK_OK(accel_model_get_num_parameters(a, &na));
    CHECK_OK(accel_model_get_num_parameters(b, &nb));
    if (na != nb || na == 0) return 0;
    for (k = 0; k < na && same; ++k) {
        const char *name = NULL, *other = NULL;
        accel_tensor_t *ta = NULL, *tb = NULL;
        size_t ba = 0, bb = 0;
        accel_dtype_t da = 0, db = 0;
        CHECK_OK(accel_model_get_parameter_name(a, k, &name));
        CHECK_OK(accel_model_get_parameter_name(b, k, &other));
        if (name == NULL || other == NULL || strcmp(name, other) != 0) return 0;
        CHECK_OK(accel_model_get_tensor(a, name, &ta));
        CHECK_OK(accel_model_get_tensor(b, name, &tb));
        CHECK_OK(accel_tensor_get_nbytes(ta, &ba));
        CHECK_OK(accel_tensor_get_nbytes(tb, &bb));
        CHECK_OK(accel_tensor_get_dtype(ta, &da));
        CHECK_OK(accel_tensor_get_dtype(tb, &db));
        if (ba != bb || da != db) {
            same = 0;
        } else {
            unsigned char *x = (unsigned char *)malloc(ba + 1), *y = (unsigned char *)malloc(bb + 1);
            CHECK_OK(accel_tensor_copy_to_buffer(ta, x, ba));
            CHECK_OK(accel_tensor_copy_to_buffer(tb, y, bb));
            same = memcmp(x, y, ba) == 0;
            free(x);
            free(y);
        }
        accel_tensor_free(ta);
        accel_tensor_free(tb);
    }
    return same;
}

static accel_model_t *seeded_gpt(uint64_t seed)
{
    accel_model_t *m = NULL;
    CHECK_OK(accel_random_set_seed(seed, false, false));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    return m;
}

/* Logits of `m` for a fixed batch, bytes compared. */
static int same_logits(accel_model_t *a, accel_model_t *b)
{
    int64_t ids[16], shape[2] = {2, 8};
    accel_tensor_t *x, *ya = NULL, *yb = NULL;
    size_t na = 0, nb = 0;
    int same = 0, i;
    for (i = 0; i < 16; ++i) ids[i] = (5 * i + 3) % 23;
    x = tensor_i64(ids, shape, 2);
    CHECK_OK(accel_model_forward_no_grad(a, x, &ya));
    CHECK_OK(accel_model_forward_no_grad(b, x, &yb));
    if (ya != NULL && yb != NULL && accel_tensor_get_nbytes(ya, &na) == ACCEL_OK &&
        accel_tensor_get_nbytes(yb, &nb) == ACCEL_OK && na == nb) {
        unsigned char *p = (unsigned char *)malloc(na), *q = (unsigned char *)malloc(nb);
        CHECK_OK(accel_tensor_copy_to_buffer(ya, p, na));
        CHECK_OK(accel_tensor_copy_to_buffer(yb, q, nb));
        same = memcmp(p, q, na) == 0;
        free(p);
        free(q);
    }
    accel_tensor_free(x);
    accel_tensor_free(ya);
    accel_tensor_free(yb);
    return same;
}

static void test_round_trips(void)
{
    accel_model_t *m = seeded_gpt(3), *back = NULL, *other = seeded_gpt(4);
    char *report = NULL;
    CHECK(system("rm -rf pt_one pt_shards pt_bin && mkdir pt_bin") == 0);
    /* A model of other values is not the same (the comparison can fail). */
    CHECK(!same_parameters(m, other));

    CHECK_OK(accel_model_save_pretrained(m, "pt_one", NULL));
    CHECK(file_exists("pt_one/config.json") && file_exists("pt_one/model.safetensors"));
    CHECK_OK(accel_model_from_pretrained_with_report("pt_one", "{\"strict\": true}", &back, &report));
    CHECK(back != NULL && same_parameters(m, back) && same_logits(m, back));
    /* GPT-2 files have no lm_head.weight (tied): nothing missing, nothing unexpected. */
    CHECK(report != NULL && strstr(report, "\"missing_keys\": []") != NULL &&
          strstr(report, "\"unexpected_keys\": []") != NULL);
    accel_string_free(report);
    accel_model_free(back);
    back = NULL;

    /* Shards of at most 10 KB with the index (the model has 31 KB of float32 weights: 4 shards). */
    CHECK_OK(accel_model_save_pretrained(m, "pt_shards", "{\"max_shard_size\": \"10KB\"}"));
    CHECK(file_exists("pt_shards/model.safetensors.index.json") && file_exists("pt_shards/model-00004-of-00004.safetensors") &&
          !file_exists("pt_shards/model.safetensors"));
    CHECK_OK(accel_model_from_pretrained("pt_shards", NULL, &back));
    CHECK(back != NULL && same_parameters(m, back) && same_logits(m, back));
    accel_model_free(back);
    back = NULL;

    /* torch.save's pytorch_model.bin (into an existing folder). */
    CHECK_OK(accel_model_save_pretrained(m, "pt_bin", "{\"safe_serialization\": false}"));
    CHECK(file_exists("pt_bin/pytorch_model.bin") && !file_exists("pt_bin/model.safetensors"));
    CHECK_OK(accel_model_from_pretrained("pt_bin", NULL, &back));
    CHECK(back != NULL && same_parameters(m, back));
    accel_model_free(back);
    back = NULL;
    /* pytorch_model-0000i-of-0000n.bin shards with pytorch_model.bin.index.json (the single file is removed first:
     * the index comes before it in transformers' order, but the test must not pass by reading the old file). */
    CHECK(remove("pt_bin/pytorch_model.bin") == 0);
    CHECK_OK(accel_model_save_pretrained(m, "pt_bin", "{\"safe_serialization\": false, \"max_shard_size\": \"10KB\"}"));
    CHECK(file_exists("pt_bin/pytorch_model.bin.index.json") && file_exists("pt_bin/pytorch_model-00001-of-00004.bin"));
    CHECK_OK(accel_model_from_pretrained("pt_bin", NULL, &back));
    CHECK(back != NULL && same_parameters(m, back));
    accel_model_free(back);
    accel_model_free(other);
    accel_model_free(m);
}

static void check_param_dtype(const accel_model_t *m, accel_dtype_t want)
{
    accel_tensor_t *t = NULL;
    accel_dtype_t d = -1;
    CHECK_OK(accel_model_get_tensor(m, "transformer.wte.weight", &t));
    CHECK_OK(accel_tensor_get_dtype(t, &d));
    CHECK(d == want);
    accel_tensor_free(t);
}

/* bfloat16 weights stay bfloat16 (transformers' torch_dtype "auto"), torch_dtype converts, config.json says it. */
static void test_dtypes(void)
{
    accel_model_t *m = seeded_gpt(5), *bf = NULL, *back = NULL, *f32 = NULL;
    char text[8192];
    FILE *f;
    size_t n;
    CHECK(system("rm -rf pt_f32 pt_bf16") == 0);
    CHECK_OK(accel_model_save_pretrained(m, "pt_f32", NULL));
    CHECK_OK(accel_model_from_pretrained("pt_f32", "{\"torch_dtype\": \"bfloat16\"}", &bf));
    check_param_dtype(bf, ACCEL_DTYPE_BFLOAT16);
    CHECK_OK(accel_model_save_pretrained(bf, "pt_bf16", NULL));
    f = fopen("pt_bf16/config.json", "rb");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    CHECK(strstr(text, "\"torch_dtype\":\t\"bfloat16\"") != NULL || strstr(text, "\"torch_dtype\": \"bfloat16\"") != NULL);
    CHECK_OK(accel_model_from_pretrained("pt_bf16", NULL, &back));
    check_param_dtype(back, ACCEL_DTYPE_BFLOAT16);
    CHECK(back != NULL && same_parameters(bf, back) && same_logits(bf, back));
    CHECK_OK(accel_model_from_pretrained("pt_bf16", "{\"torch_dtype\": \"float32\"}", &f32));
    check_param_dtype(f32, ACCEL_DTYPE_FLOAT32);
    accel_model_free(f32); /* before the failing call sets the handle to NULL */
    CHECK_FAILS(accel_model_from_pretrained("pt_bf16", "{\"torch_dtype\": \"int8\"}", &f32), ACCEL_ERR_INVALID_ARGUMENT,
                "torch_dtype: expected");
    accel_model_free(back);
    accel_model_free(bf);
    accel_model_free(m);
}

/* Tensors that do not match config.json: the tensor and the file are named; strict false lists them. */
static void test_mismatches(void)
{
    accel_model_t *m = seeded_gpt(6), *out = NULL;
    char *report = NULL;
    CHECK(system("rm -rf pt_mis && mkdir pt_mis") == 0);
    CHECK_OK(accel_model_save_pretrained(m, "pt_mis", NULL));
    /* One layer in the config, two in the file: unexpected. */
    write_gpt2_config("pt_mis", 1, 16, "");
    CHECK_FAILS(accel_model_from_pretrained("pt_mis", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "tensor \"transformer.h.1.attn.c_attn.bias\" in ");
    CHECK_FAILS(accel_model_from_pretrained("pt_mis", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "pt_mis/model.safetensors is not a tensor of the model");
    CHECK(out == NULL);
    CHECK_OK(accel_model_from_pretrained_with_report("pt_mis", "{\"strict\": false}", &out, &report));
    CHECK(out != NULL && report != NULL && strstr(report, "\"unexpected_keys\": [\"transformer.h.1.") != NULL);
    accel_string_free(report);
    accel_model_free(out);
    out = NULL;
    /* Three layers in the config: missing. */
    write_gpt2_config("pt_mis", 3, 16, "");
    CHECK_FAILS(accel_model_from_pretrained("pt_mis", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "tensor \"transformer.h.2.ln_1.weight\" of the model is in none of the weight files of");
    CHECK_OK(accel_model_from_pretrained_with_report("pt_mis", "{\"strict\": false}", &out, &report));
    CHECK(report != NULL && strstr(report, "\"missing_keys\": [\"transformer.h.2.ln_1.weight\"") != NULL);
    accel_string_free(report);
    accel_model_free(out);
    out = NULL;
    /* Other position count: a shape mismatch, strict or not. */
    write_gpt2_config("pt_mis", 2, 8, "");
    CHECK_FAILS(accel_model_from_pretrained("pt_mis", "{\"strict\": false}", &out), ACCEL_ERR_INVALID_ARGUMENT,
                "tensor \"transformer.wpe.weight\" in ");
    CHECK_FAILS(accel_model_from_pretrained("pt_mis", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "model.safetensors has shape [16, 16], the model's is [8, 16]");
    /* config.json as transformers writes it (keys accel ignores) loads. */
    write_gpt2_config("pt_mis", 2, 16, "");
    CHECK_OK(accel_model_from_pretrained("pt_mis", NULL, &out));
    CHECK(out != NULL && same_parameters(m, out));
    accel_model_free(out);
    out = NULL;
    accel_model_free(m);
}

/* Folders that cannot be loaded, and bad arguments. */
static void test_refusals(void)
{
    accel_model_t *m = seeded_gpt(7), *out = NULL, *mlp = NULL;
    char *report = NULL;
    CHECK(system("rm -rf pt_bad pt_cfg pt_shd && mkdir pt_cfg") == 0);
    CHECK_FAILS(accel_model_from_pretrained("pt_nowhere", NULL, &out), ACCEL_ERR_NOT_FOUND, "does not exist");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_NOT_FOUND, "has no config.json");
    write_text("pt_cfg/config.json", "{\"model_type\": \"gpt2\", ");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "config.json: malformed JSON at byte");
    write_text("pt_cfg/config.json", "[1, 2]");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT, "expected a JSON object");
    write_text("pt_cfg/config.json", "{\"model_type\": \"bert\", \"hidden_size\": 8}");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_UNIMPLEMENTED,
                "model_type \"bert\" is not supported");
    write_text("pt_cfg/config.json", "{\"n_layer\": 2}");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT, "model_type: required");
    write_gpt2_config("pt_cfg", 2, 16, ", \"n_experts\": 4");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT, "n_experts: unknown key");
    write_gpt2_config("pt_cfg", 2, 16, ", \"reorder_and_upcast_attn\": true");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_UNIMPLEMENTED, "reorder_and_upcast_attn");
    write_gpt2_config("pt_cfg", 2, 16, "");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg", NULL, &out), ACCEL_ERR_NOT_FOUND, "holds no weights");
    CHECK_FAILS(accel_model_from_pretrained("pt_cfg/config.json", NULL, &out), ACCEL_ERR_INVALID_ARGUMENT, "is a file");
    /* A damaged weights file. */
    CHECK_OK(accel_model_save_pretrained(m, "pt_bad", NULL));
    CHECK(truncate("pt_bad/model.safetensors", 500) == 0);
    CHECK_FAILS(accel_model_from_pretrained("pt_bad", NULL, &out), ACCEL_ERR_DATA_LOSS, "model.safetensors");
    /* An index naming a shard that is gone, and one naming a tensor its shard lacks. */
    CHECK_OK(accel_model_save_pretrained(m, "pt_shd", "{\"max_shard_size\": \"10KB\"}"));
    CHECK(rename("pt_shd/model-00004-of-00004.safetensors", "pt_shd/gone") == 0);
    CHECK_FAILS(accel_model_from_pretrained("pt_shd", NULL, &out), ACCEL_ERR_NOT_FOUND,
                "model-00004-of-00004.safetensors, which does not exist");
    CHECK(rename("pt_shd/gone", "pt_shd/model-00004-of-00004.safetensors") == 0);
    write_text("pt_shd/model.safetensors.index.json",
               "{\"metadata\": {}, \"weight_map\": {\"transformer.wte.weight\": \"model-00004-of-00004.safetensors\"}}");
    CHECK_FAILS(accel_model_from_pretrained("pt_shd", NULL, &out), ACCEL_ERR_DATA_LOSS,
                "tensor \"transformer.wte.weight\" is listed in model-00004-of-00004.safetensors, which does not hold it");
    write_text("pt_shd/model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../x\"}}");
    CHECK_FAILS(accel_model_from_pretrained("pt_shd", NULL, &out), ACCEL_ERR_DATA_LOSS, "is not a plain file name");
    write_text("pt_shd/model.safetensors.index.json", "{\"weight_map\": ");
    CHECK_FAILS(accel_model_from_pretrained("pt_shd", NULL, &out), ACCEL_ERR_DATA_LOSS, "model.safetensors.index.json");
    CHECK(out == NULL);
    /* Options. */
    CHECK_FAILS(accel_model_from_pretrained("pt_bad", "{\"stric\": true}", &out), ACCEL_ERR_INVALID_ARGUMENT,
                "stric: unknown key");
    CHECK_FAILS(accel_model_from_pretrained("pt_bad", "{\"strict\": 1}", &out), ACCEL_ERR_INVALID_ARGUMENT, "strict:");
    CHECK_FAILS(accel_model_from_pretrained(NULL, NULL, &out), ACCEL_ERR_INVALID_ARGUMENT, "path");
    CHECK_FAILS(accel_model_from_pretrained("pt_bad", NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_model_from_pretrained_with_report("pt_bad", NULL, &out, NULL), ACCEL_ERR_INVALID_ARGUMENT,
                "out_report");
    CHECK(report == NULL);
    CHECK_FAILS(accel_model_save_pretrained(m, "pt_x", "{\"adapter_only\": true}"), ACCEL_ERR_FAILED_PRECONDITION,
                "has no LoRA adapters");
    CHECK_FAILS(accel_model_save_pretrained(m, "pt_x", "{\"adapter_only\": true, \"merge\": true}"),
                ACCEL_ERR_INVALID_ARGUMENT, "exclude each other");
    CHECK_FAILS(accel_model_save_pretrained(m, "pt_x", "{\"max_shard_size\": \"10 parsecs\"}"),
                ACCEL_ERR_INVALID_ARGUMENT, "max_shard_size");
    CHECK_FAILS(accel_model_save_pretrained(m, "pt_cfg/config.json", NULL), ACCEL_ERR_ALREADY_EXISTS, "is a file");
    CHECK_FAILS(accel_model_save_pretrained(NULL, "pt_x", NULL), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 3]}", &mlp));
    CHECK_FAILS(accel_model_save_pretrained(mlp, "pt_x", NULL), ACCEL_ERR_FAILED_PRECONDITION,
                "has no Hugging Face counterpart");
    CHECK(!file_exists("pt_x"));
    accel_model_free(mlp);
    accel_model_free(m);
}

/* A prepared model is written through its accelerator (the one-process case of the gathering save_model). */
static void test_prepared(void)
{
    accel_model_t *m = seeded_gpt(8), *back = NULL;
    accel_accelerator_t *acc = NULL;
    CHECK(system("rm -rf pt_prep") == 0);
    CHECK_OK(accel_accelerator_create("{\"cpu\": true}", &acc));
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_model_save_pretrained(m, "pt_prep", NULL));
    CHECK_OK(accel_model_from_pretrained("pt_prep", NULL, &back));
    CHECK(back != NULL && same_parameters(m, back));
    accel_accelerator_free(acc);
    CHECK_FAILS(accel_model_save_pretrained(m, "pt_prep", NULL), ACCEL_ERR_FAILED_PRECONDITION,
                "the accelerator that prepared it was freed");
    accel_model_free(back);
    accel_model_free(m);
}

/* ---- against Python's reference ------------------------------------------------------------------------ */

static int test_reference(void)
{
    const char *py = getenv("ACCEL_PYTHON"), *gpt = getenv("ACCEL_GPT_REFERENCE");
    char cmd[1200];
    accel_model_t *m = NULL;
    double worst;
    if (py == NULL || py[0] == '\0' || gpt == NULL) {
        fprintf(stderr, "test_pretrained reference: ACCEL_PYTHON (with torch) and ACCEL_GPT_REFERENCE must be set\n");
        return 1;
    }
    /* GPT-2: the folder the reference writes loads by its config.json alone. */
    CHECK(system("rm -rf pt_gpt_saved") == 0);
    if (gpt_reference_write(py, gpt, "pt_gpt_ref") != 0) return capi_report("test_pretrained reference");
    CHECK_OK(accel_model_from_pretrained("pt_gpt_ref", NULL, &m));
    CHECK_OK(accel_model_eval(m));
    worst = gpt_reference_logits_diff(m, "pt_gpt_ref");
    printf("test_pretrained: gpt2 folder, max |logit - reference| = %.3g\n", worst);
    CHECK(worst <= 1e-5);
    /* save_pretrained writes GPT2LMHeadModel's folder back (Python checks keys, shapes, dtypes, values, config). */
    CHECK_OK(accel_model_save_pretrained(m, "pt_gpt_saved", NULL));
    snprintf(cmd, sizeof cmd, "'%s' '%s' check pt_gpt_saved", py, gpt);
    CHECK(system(cmd) == 0);
    accel_model_free(m);
    return capi_report("test_pretrained reference");
}

/* The accel side of pretrained_check.py: DIR/folder through from_pretrained (strict), `steps` training steps on
 * DIR/ids.bin and DIR/labels.bin (int64 [steps, B, T]) with the causal_lm loss, the losses into
 * DIR/accel_losses.bin (float64) and save_pretrained into DIR/accel_out. */
static int train_llama(const char *dir)
{
    char path[1024], params[200], optimizer[16] = "", options[160];
    long B = 0, T = 0, steps = 0, n, i;
    double lr = 0, losses[64];
    int64_t *ids = NULL, *labels = NULL, shape[2];
    accel_model_t *m = NULL;
    accel_accelerator_t *acc = NULL;
    accel_optimizer_t *opt = NULL;

    snprintf(path, sizeof path, "%s/params.txt", dir);
    n = read_file(path, params, sizeof params - 1);
    params[n > 0 ? n : 0] = '\0';
    CHECK(sscanf(params, "%ld %ld %ld %lf %15s", &B, &T, &steps, &lr, optimizer) == 5 && steps <= 64 && B * T > 0);
    if (capi_failures) return capi_report("test_pretrained llama");
    ids = (int64_t *)calloc((size_t)(steps * B * T), sizeof(int64_t));
    labels = (int64_t *)calloc((size_t)(steps * B * T), sizeof(int64_t));
    snprintf(path, sizeof path, "%s/ids.bin", dir);
    CHECK(read_file(path, ids, (size_t)(steps * B * T) * 8) == steps * B * T * 8);
    snprintf(path, sizeof path, "%s/labels.bin", dir);
    CHECK(read_file(path, labels, (size_t)(steps * B * T) * 8) == steps * B * T * 8);

    snprintf(path, sizeof path, "%s/folder", dir);
    CHECK_OK(accel_model_from_pretrained(path, "{\"strict\": true}", &m));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    /* torch.optim.SGD without momentum, torch.optim.AdamW with its defaults (weight_decay 0.01). */
    if (strcmp(optimizer, "adamw") == 0)
        snprintf(options, sizeof options, "{\"type\": \"adamw\", \"lr\": %.17g, \"weight_decay\": 0.01}", lr);
    else
        snprintf(options, sizeof options, "{\"type\": \"sgd\", \"lr\": %.17g}", lr);
    CHECK_OK(accel_optimizer_create(m, options, &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    shape[0] = B;
    shape[1] = T;
    for (i = 0; i < steps && capi_failures == 0; ++i) {
        accel_tensor_t *x = tensor_i64(ids + i * B * T, shape, 2), *y = tensor_i64(labels + i * B * T, shape, 2);
        accel_tensor_t *out = NULL, *loss = NULL;
        CHECK_OK(accel_model_forward(m, x, &out));
        CHECK_OK(accel_loss_compute("causal_lm", out, y, &loss));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_tensor_get_item(loss, &losses[i]));
        accel_tensor_free(x);
        accel_tensor_free(y);
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    write_file(dir, "accel_losses.bin", losses, (size_t)steps * sizeof(double));
    snprintf(path, sizeof path, "%s/accel_out", dir);
    CHECK_OK(accel_model_save_pretrained(m, path, "{\"max_shard_size\": \"20KB\"}"));
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    free(ids);
    free(labels);
    return capi_report("test_pretrained llama");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "reference") == 0) return test_reference();
    if (argc > 2 && strcmp(argv[1], "llama") == 0) return train_llama(argv[2]);
    test_round_trips();
    test_dtypes();
    test_mismatches();
    test_refusals();
    test_prepared();
    return capi_report("test_pretrained");
}
