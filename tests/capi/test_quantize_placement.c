/*
 * load_and_quantize_model's placement and dtype arguments (accel_model_quantize's JSON with "weights_location"):
 *
 *   - "device_map" (a map or "auto" with "max_memory") with "offload_folder": an empty llama quantized while loading
 *     its float folder, its second block on disk (the folder holds that block's quantized tensors: int8 or packed
 *     uint8), computes the logits of the same model quantized in memory, bit for bit (int8 and NF4 with double
 *     quantization); the inferred map puts the blocks that do not fit max_memory on disk;
 *   - a "weights_location" that holds pre-quantized tensors (save_pretrained of a quantized model) loads them as they
 *     are: the logits of from_pretrained's model and of the model that was saved, bit for bit, also with disk offload;
 *     a config that does not match the folder is named;
 *   - "torch_dtype": "bfloat16" makes the unquantized tensors bfloat16, the same as quantizing in memory with it;
 *     "float16" and GPU targets are refused by name, and so are placement keys without weights_location and a disk
 *     map without offload_folder.
 */
#define _XOPEN_SOURCE 700
#include "capi_helpers.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#define T 6
#define VOCAB 300

static const char *kLlama = "{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96,"
                            " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2}";
static const char *kLlamaEmpty = "{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96,"
                                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                                 " \"empty_init\": true}";
static const char *kNf4 = "\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true,"
                          " \"bnb_4bit_compute_dtype\": \"fp32\"";
static const char *kInt8 = "\"load_in_8bit\": true";
static const char *kBlock1OnDisk = "{\"model.embed_tokens\": \"cpu\", \"model.layers.0\": \"cpu\", "
                                   "\"model.layers.1\": \"disk\", \"model.norm\": \"cpu\", \"lm_head\": \"cpu\"}";

static char g_dir[256];

static const char *folder(const char *name)
{
    static char path[4][512];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", g_dir, name);
    return p;
}

/* The logits' bytes (float32, or bfloat16 under torch_dtype: compared as bytes either way). */
static void logits_of(accel_model_t *m, float *out)
{
    const int64_t shape[2] = {1, T}, ids[T] = {5, 8, 13, 21, 34, 55};
    accel_tensor_t *x = tensor_i64(ids, shape, 2), *y = NULL;
    size_t nbytes = 0;
    memset(out, 0, sizeof(float) * T * VOCAB);
    CHECK_OK(accel_model_forward_no_grad(m, x, &y));
    if (y != NULL) CHECK_OK(accel_tensor_get_nbytes(y, &nbytes));
    if (y != NULL && nbytes <= sizeof(float) * T * VOCAB) CHECK_OK(accel_tensor_copy_to_buffer(y, out, nbytes));
    accel_tensor_free(y);
    accel_tensor_free(x);
}

/* The float folder the tests load (seeded), written once. */
static void write_float_folder(void)
{
    accel_model_t *m = NULL;
    CHECK_OK(accel_random_set_seed(3, false, false));
    CHECK_OK(accel_model_create_from_json(kLlama, &m));
    CHECK_OK(accel_model_save_pretrained(m, folder("float"), NULL));
    accel_model_free(m);
}

/* The float folder's model quantized in memory with `keys` (the config's keys, no braces). */
static accel_model_t *quantized_in_memory(const char *keys)
{
    char config[1024];
    accel_model_t *m = NULL;
    CHECK_OK(accel_model_from_pretrained(folder("float"), NULL, &m));
    snprintf(config, sizeof config, "{%s}", keys);
    if (m != NULL) CHECK_OK(accel_model_quantize(m, config));
    return m;
}

/* An empty llama quantized while loading `location` with `keys` and `extra` (more keys, or ""). */
static accel_model_t *loaded(const char *keys, const char *location, const char *extra, accel_status_t expect,
                             const char *needle)
{
    char config[2048];
    accel_model_t *e = NULL;
    CHECK_OK(accel_model_create_from_json(kLlamaEmpty, &e));
    snprintf(config, sizeof config, "{%s, \"weights_location\": \"%s\"%s%s}", keys, location, *extra ? ", " : "", extra);
    if (expect == ACCEL_OK) CHECK_OK(accel_model_quantize(e, config));
    else {
        CHECK_FAILS(accel_model_quantize(e, config), expect, needle);
        accel_model_free(e);
        e = NULL;
    }
    return e;
}

static int same_logits(accel_model_t *a, accel_model_t *b)
{
    static float x[T * VOCAB], y[T * VOCAB];
    if (a == NULL || b == NULL) return 0;
    logits_of(a, x);
    logits_of(b, y);
    return memcmp(x, y, sizeof x) == 0;
}

/* Whether the offload folder's index.json lists `tensor` with `dtype`. */
static int index_has(const char *dir, const char *tensor, const char *dtype)
{
    static char text[1 << 16];
    char path[600], want[400];
    long n;
    snprintf(path, sizeof path, "%s/index.json", dir);
    n = read_file(path, text, sizeof text - 1);
    if (n <= 0) return 0;
    text[n] = '\0';
    snprintf(want, sizeof want, "\"%s\"", tensor);
    const char *at = strstr(text, want);
    if (at == NULL) return 0;
    snprintf(want, sizeof want, "\"dtype\": \"%s\"", dtype);
    const char *d = strstr(at, want);
    const char *next = strchr(at + strlen(tensor) + 2, '}');
    return d != NULL && next != NULL && d < next;
}

static void remove_tree(const char *dir);

/* A given map with block 1 on disk, for one kind (keys) whose block-1 weight is stored as `weight_dtype`. */
static void test_disk_map(const char *keys, const char *weight_dtype, const char *offload)
{
    char extra[1024];
    accel_model_t *want = quantized_in_memory(keys), *got = NULL;
    remove_tree(offload);
    snprintf(extra, sizeof extra, "\"device_map\": %s, \"offload_folder\": \"%s\"", kBlock1OnDisk, offload);
    got = loaded(keys, folder("float"), extra, ACCEL_OK, NULL);
    CHECK(same_logits(want, got));
    CHECK(index_has(offload, "model.layers.1.self_attn.q_proj.weight", weight_dtype));
    CHECK(index_has(offload, "model.layers.1.input_layernorm.weight", "float32"));
    /* block 0 stays in memory; the model is dispatched (its disk weights exist only while their block computes) */
    CHECK(!index_has(offload, "model.layers.0.self_attn.q_proj.weight", weight_dtype));
    if (got != NULL) {
        accel_tensor_t *t = NULL;
        CHECK_FAILS(accel_model_get_tensor(got, "model.layers.1.self_attn.q_proj.weight", &t),
                    ACCEL_ERR_FAILED_PRECONDITION, "disk");
    }
    accel_model_free(got);
    accel_model_free(want);
}

/* "auto" with a CPU budget for the embeddings (76.8 kB) and one int8 block (31 kB), keeping room for the largest
 * layer (the head, 76.8 kB): the second block and everything after it go to disk. */
static void test_inferred_map(void)
{
    char extra[1024];
    accel_model_t *want = quantized_in_memory(kInt8), *got = NULL;
    remove_tree(folder("offload_auto"));
    snprintf(extra, sizeof extra, "\"device_map\": \"auto\", \"max_memory\": {\"cpu\": 190000}, \"offload_folder\": \"%s\"",
             folder("offload_auto"));
    got = loaded(kInt8, folder("float"), extra, ACCEL_OK, NULL);
    CHECK(same_logits(want, got));
    CHECK(index_has(folder("offload_auto"), "model.layers.1.mlp.up_proj.weight", "int8"));
    CHECK(index_has(folder("offload_auto"), "lm_head.weight", "float32"));
    CHECK(!index_has(folder("offload_auto"), "model.layers.0.mlp.up_proj.weight", "int8"));
    accel_model_free(got);
    accel_model_free(want);
}

/* A pre-quantized folder as weights_location: loaded as it is, equal to from_pretrained's and the saved model's. */
static void test_prequantized(void)
{
    char extra[1024];
    accel_model_t *saved = quantized_in_memory(kNf4), *pretrained = NULL, *got = NULL;
    if (saved != NULL) CHECK_OK(accel_model_save_pretrained(saved, folder("nf4"), NULL));
    CHECK_OK(accel_model_from_pretrained(folder("nf4"), NULL, &pretrained));
    got = loaded(kNf4, folder("nf4"), "", ACCEL_OK, NULL);
    CHECK(same_logits(saved, got));
    CHECK(same_logits(pretrained, got));
    accel_model_free(got);
    /* with its second block on disk: the folder's packed weights are written there as they are */
    remove_tree(folder("offload_pre"));
    snprintf(extra, sizeof extra, "\"device_map\": %s, \"offload_folder\": \"%s\"", kBlock1OnDisk, folder("offload_pre"));
    got = loaded(kNf4, folder("nf4"), extra, ACCEL_OK, NULL);
    CHECK(same_logits(saved, got));
    CHECK(index_has(folder("offload_pre"), "model.layers.1.mlp.down_proj.weight", "uint8"));
    accel_model_free(got);
    /* a config that does not match the folder: FP4 named by the state's key, 8-bit by the weight's shape */
    (void)loaded("\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"fp4\", \"bnb_4bit_use_double_quant\": true, "
                 "\"bnb_4bit_compute_dtype\": \"fp32\"",
                 folder("nf4"), "", ACCEL_ERR_INVALID_ARGUMENT, "quant_state");
    (void)loaded(kInt8, folder("nf4"), "", ACCEL_ERR_INVALID_ARGUMENT,
                 "\"model.layers.0.self_attn.q_proj.weight\" in");
    accel_model_free(pretrained);
    accel_model_free(saved);
}

static accel_dtype_t dtype_of(accel_model_t *m, const char *name)
{
    accel_tensor_t *t = NULL;
    accel_dtype_t d = -1;
    CHECK_OK(accel_model_get_tensor(m, name, &t));
    if (t != NULL) CHECK_OK(accel_tensor_get_dtype(t, &d));
    accel_tensor_free(t);
    return d;
}

/* torch_dtype: the unquantized tensors take it, in memory and while loading alike. */
static void test_torch_dtype(void)
{
    char keys[512];
    snprintf(keys, sizeof keys, "%s, \"torch_dtype\": \"bfloat16\"", kNf4);
    accel_model_t *want = quantized_in_memory(keys);
    accel_model_t *got = loaded(keys, folder("float"), "", ACCEL_OK, NULL);
    CHECK(same_logits(want, got));
    if (got != NULL) {
        CHECK(dtype_of(got, "model.embed_tokens.weight") == ACCEL_DTYPE_BFLOAT16);
        CHECK(dtype_of(got, "lm_head.weight") == ACCEL_DTYPE_BFLOAT16);
        CHECK(dtype_of(got, "model.layers.0.input_layernorm.weight") == ACCEL_DTYPE_BFLOAT16);
        CHECK(dtype_of(got, "model.layers.0.self_attn.q_proj.weight") == ACCEL_DTYPE_UINT8);
        CHECK(dtype_of(got, "model.layers.0.self_attn.q_proj.weight.absmax") != ACCEL_DTYPE_BFLOAT16);
    }
    accel_model_free(got);
    accel_model_free(want);
    /* keep_in_fp32_modules stay float32 (the dtypes only: accel's llama norm computes in its input's dtype) */
    snprintf(keys, sizeof keys, "%s, \"torch_dtype\": \"bfloat16\", \"keep_in_fp32_modules\": [\"model.norm\"]", kNf4);
    got = loaded(keys, folder("float"), "", ACCEL_OK, NULL);
    if (got != NULL) {
        CHECK(dtype_of(got, "model.norm.weight") == ACCEL_DTYPE_FLOAT32);
        CHECK(dtype_of(got, "model.layers.1.post_attention_layernorm.weight") == ACCEL_DTYPE_BFLOAT16);
    }
    accel_model_free(got);
}

static void test_refused(void)
{
    char extra[1024];
    accel_model_t *m = NULL;
    CHECK_OK(accel_model_create_from_json(kLlama, &m));
    CHECK_FAILS(accel_model_quantize(m, "{\"load_in_8bit\": true, \"device_map\": \"auto\"}"), ACCEL_ERR_INVALID_ARGUMENT,
                "weights_location");
    CHECK_FAILS(accel_model_quantize(m, "{\"load_in_8bit\": true, \"torch_dtype\": \"float16\"}"),
                ACCEL_ERR_UNIMPLEMENTED, "float16");
    accel_model_free(m);
    (void)loaded(kInt8, folder("float"), "\"device_map\": {\"\": 0}", ACCEL_ERR_UNIMPLEMENTED, "GPU");
    snprintf(extra, sizeof extra, "\"device_map\": %s", kBlock1OnDisk);
    (void)loaded(kInt8, folder("float"), extra, ACCEL_ERR_INVALID_ARGUMENT, "offload_folder");
    (void)loaded(kInt8, folder("float"), "\"device_map\": {\"model\": \"cpu\"}", ACCEL_ERR_INVALID_ARGUMENT, "lm_head");
    (void)loaded(kInt8, folder("float"), "\"max_memory\": {\"cpu\": 1000}", ACCEL_ERR_INVALID_ARGUMENT, "max_memory");
    /* a checkpoint without lm_head.weight (a tied model's): named, also for a model in memory, whose own head
     * would otherwise stay as it was */
    CHECK_OK(accel_model_create_from_json("{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                                          "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                                          "\"num_key_value_heads\": 2, \"tie_word_embeddings\": true}", &m));
    CHECK_OK(accel_model_save_pretrained(m, folder("tied"), NULL));
    accel_model_free(m);
    m = NULL;
    (void)loaded(kInt8, folder("tied"), "", ACCEL_ERR_INVALID_ARGUMENT, "lm_head.weight");
    CHECK_OK(accel_model_create_from_json(kLlama, &m));
    snprintf(extra, sizeof extra, "{%s, \"weights_location\": \"%s\"}", kInt8, folder("tied"));
    CHECK_FAILS(accel_model_quantize(m, extra), ACCEL_ERR_INVALID_ARGUMENT, "lm_head.weight");
    accel_model_free(m);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    int rc;
    snprintf(g_dir, sizeof g_dir, "quantize_placement_%ld", (long)getpid());
    CHECK(mkdir(g_dir, 0755) == 0);
    write_float_folder();
    test_disk_map(kInt8, "int8", folder("offload_int8"));
    test_disk_map(kNf4, "uint8", folder("offload_nf4"));
    test_inferred_map();
    test_prequantized();
    test_torch_dtype();
    test_refused();
    rc = capi_report("test_quantize_placement");
    remove_tree(g_dir);
    return rc;
}
