/*
 * Loading quantized models without their float model in memory first.
 *
 *   capi_test_quantize_load       a small pre-quantized llama folder: empty_init builds it quantized on meta (a
 *                                 forward names the meta tensor; loading the folder gives it values); under
 *                                 zero3_init_flag it is refused by name (Accelerate refuses quantized models
 *                                 under DeepSpeed). weights_location (load_and_quantize_model): an empty llama
 *                                 quantized while loading a float folder computes the logits of the same model
 *                                 quantized in memory, bit for bit (NF4 and int8); bad values are named.
 *
 *   capi_test_quantize_load rss   (a process of its own, not under the sanitizers) a 4-bit llama folder written by
 *                                 save_pretrained loads through accel_model_from_pretrained, and through empty_init
 *                                 plus accel_model_load_checkpoint, with a peak resident set near the quantized
 *                                 size (the layers are made quantized on the meta device and the folder's tensors
 *                                 read into them), far below the float model's; the logits equal the model's that
 *                                 was saved, bit for bit. Each load runs in a forked child, so that one load's
 *                                 heap is not the next one's.
 */
#define _XOPEN_SOURCE 700
#include "capi_helpers.h"

#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define RSS_T 8
#define RSS_VOCAB 4000

/* 8 blocks of 4 * 512^2 + 3 * 512 * 1536 weights (13.6 MB in float32, 1.8 MB in NF4 with double quantization),
 * embeddings and head of 4000 x 512 (8.2 MB each, kept float: Accelerate's rule skips lm_head). */
static const char *kRssLlama = "{\"type\": \"llama\", \"vocab_size\": 4000, \"hidden_size\": 512, \"intermediate_size\": 1536,"
                               " \"num_hidden_layers\": 8, \"num_attention_heads\": 8, \"max_position_embeddings\": 64}";
static const char *kNf4 = "{\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true,"
                          " \"bnb_4bit_compute_dtype\": \"fp32\"}";
static const int64_t kPrompt[RSS_T] = {3, 1, 4, 1, 5, 9, 2, 6};

static char g_dir[256];

static const char *folder(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    return path;
}

static void logits_of(accel_model_t *m, float *out)
{
    const int64_t shape[2] = {1, RSS_T};
    accel_tensor_t *x = tensor_i64(kPrompt, shape, 2), *y = NULL;
    CHECK_OK(accel_model_forward_no_grad(m, x, &y));
    if (y != NULL) CHECK(read_f32(y, out, RSS_T * RSS_VOCAB) == 0);
    accel_tensor_free(y);
    accel_tensor_free(x);
}

/* Runs `fn` in a forked child; returns whether it passed. */
static int in_child(void (*fn)(void))
{
    int status = 0;
    pid_t pid;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        capi_failures = 0; /* the child's own checks */
        fn();
        fflush(stdout);
        _exit(capi_failures == 0 ? 0 : 1);
    }
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The folder: a seeded llama quantized in memory, saved with save_pretrained, and its logits. */
static void write_folder(void)
{
    static float logits[RSS_T * RSS_VOCAB];
    accel_model_t *m = NULL;
    CHECK_OK(accel_random_set_seed(7, false, false));
    CHECK_OK(accel_model_create_from_json(kRssLlama, &m));
    CHECK_OK(accel_model_eval(m));
    CHECK_OK(accel_model_quantize(m, kNf4));
    CHECK_OK(accel_model_save_pretrained(m, folder("nf4"), NULL));
    logits_of(m, logits);
    write_file(folder("nf4"), "logits.f32", logits, sizeof logits);
    accel_model_free(m);
}

static const double kMib = 1024.0 * 1024.0;
/* What the loaded model holds: NF4 blocks (half a byte a weight, a uint8 absmax per 64, a float per 256 absmax),
 * the float embeddings and head, norms. */
static double quantized_mib(void)
{
    const double per_block = 4.0 * 512 * 512 + 3.0 * 512 * 1536;
    const double nf4 = 8 * (per_block / 2 + per_block / 64 + per_block / 64 / 256 * 4);
    return (nf4 + 2.0 * 4000 * 512 * 4 + (2 * 8 + 1) * 512 * 4) / kMib;
}
static double float_mib(void)
{
    return (8 * (4.0 * 512 * 512 + 3.0 * 512 * 1536) * 4 + 2.0 * 4000 * 512 * 4) / kMib;
}

/* Loads the folder (from_pretrained, or empty_init then load_checkpoint) and checks the peak and the logits. */
static void load_and_measure(int empty_first)
{
    static float want[RSS_T * RSS_VOCAB], got[RSS_T * RSS_VOCAB];
    /* LibTorch's first-use state while building (8.7 MiB resident after an empty build here), the folder's
     * pread buffers and allocator slack */
    const double margin = 24.0;
    accel_model_t *m = NULL;
    double before, peak;
    char path[600];
    snprintf(path, sizeof path, "%s/logits.f32", folder("nf4"));
    CHECK(read_file(path, want, sizeof want) == (long)sizeof want);
    before = status_mib("VmRSS:");
    reset_peak_rss();
    if (empty_first) {
        CHECK_OK(accel_model_from_pretrained(folder("nf4"), "{\"empty_init\": true}", &m));
        if (m != NULL) CHECK_OK(accel_model_load_checkpoint(m, folder("nf4"), NULL));
    } else {
        CHECK_OK(accel_model_from_pretrained(folder("nf4"), NULL, &m));
    }
    peak = status_mib("VmHWM:") - before;
    printf("test_quantize_load rss (%s): peak RSS while loading %.1f MiB above the start (the float model is %.1f "
           "MiB, the quantized one %.1f MiB; bound %.1f + %.0f)\n",
           empty_first ? "empty_init + load_checkpoint" : "from_pretrained", peak, float_mib(), quantized_mib(),
           quantized_mib(), margin);
    CHECK(peak <= quantized_mib() + margin);
    CHECK(peak < 0.5 * float_mib());
    if (m != NULL) {
        logits_of(m, got);
        CHECK(memcmp(got, want, sizeof got) == 0);
    }
    accel_model_free(m);
}

static void load_pretrained(void) { load_and_measure(0); }
static void load_empty_first(void) { load_and_measure(1); }

static int rss_main(void)
{
    CHECK(in_child(write_folder));
    CHECK(in_child(load_pretrained));
    CHECK(in_child(load_empty_first));
    return capi_report("test_quantize_load rss");
}

static const char *kSmallLlama = "{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96,"
                                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2}";

static void test_empty_and_refused(void)
{
    const int64_t shape[2] = {1, 4}, ids[4] = {1, 2, 3, 4};
    accel_model_t *m = NULL, *e = NULL;
    accel_accelerator_t *acc = NULL;
    accel_tensor_t *x = tensor_i64(ids, shape, 2), *y = NULL;
    CHECK_OK(accel_model_create_from_json(kSmallLlama, &m));
    CHECK_OK(accel_model_quantize(m, kNf4));
    CHECK_OK(accel_model_save_pretrained(m, folder("small"), NULL));
    accel_model_free(m);
    m = NULL;
    CHECK_OK(accel_model_from_pretrained(folder("small"), "{\"empty_init\": true}", &e));
    CHECK_FAILS(accel_model_forward_no_grad(e, x, &y), ACCEL_ERR_FAILED_PRECONDITION, "meta device");
    CHECK_OK(accel_model_load_checkpoint(e, folder("small"), NULL));
    CHECK_OK(accel_model_forward_no_grad(e, x, &y));
    accel_tensor_free(y);
    accel_model_free(e);
    CHECK_OK(accel_accelerator_create("{\"deepspeed_plugin\": {\"zero_stage\": 3, \"zero3_init_flag\": true}}", &acc));
    CHECK_FAILS(accel_model_from_pretrained(folder("small"), NULL, &m), ACCEL_ERR_UNIMPLEMENTED, "zero3_init_flag");
    CHECK(m == NULL);
    accel_accelerator_free(acc);
    accel_tensor_free(x);
}

static const char *kSmallLlamaEmpty = "{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96,"
                                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                                      " \"empty_init\": true}";

static void small_logits(accel_model_t *m, float *out)
{
    const int64_t shape[2] = {1, 6}, ids[6] = {5, 8, 13, 21, 34, 55};
    accel_tensor_t *x = tensor_i64(ids, shape, 2), *y = NULL;
    CHECK_OK(accel_model_forward_no_grad(m, x, &y));
    if (y != NULL) CHECK(read_f32(y, out, 6 * 300) == 0);
    accel_tensor_free(y);
    accel_tensor_free(x);
}

/* The same model quantized in memory and quantized while loading its float folder into an empty model. */
static void weights_location_kind(const char *config)
{
    static float want[6 * 300], got[6 * 300];
    char with_location[1200];
    accel_model_t *m = NULL, *e = NULL;
    CHECK_OK(accel_random_set_seed(3, false, false));
    CHECK_OK(accel_model_create_from_json(kSmallLlama, &m));
    CHECK_OK(accel_model_save_pretrained(m, folder("float"), NULL));
    CHECK_OK(accel_model_quantize(m, config));
    small_logits(m, want);
    snprintf(with_location, sizeof with_location, "%.*s, \"weights_location\": \"%s\"}", (int)strlen(config) - 1,
             config, folder("float"));
    CHECK_OK(accel_model_create_from_json(kSmallLlamaEmpty, &e));
    CHECK_OK(accel_model_quantize(e, with_location));
    small_logits(e, got);
    CHECK(memcmp(got, want, sizeof got) == 0);
    accel_model_free(e);
    accel_model_free(m);
}

static void test_weights_location(void)
{
    char bad[1200];
    accel_model_t *e = NULL, *other = NULL;
    weights_location_kind(kNf4);
    weights_location_kind("{\"load_in_8bit\": true}");
    CHECK_OK(accel_model_create_from_json(kSmallLlamaEmpty, &e));
    CHECK_FAILS(accel_model_quantize(e, kNf4), ACCEL_ERR_FAILED_PRECONDITION, "weights_location");
    CHECK_FAILS(accel_model_quantize(e, "{\"load_in_8bit\": true, \"weights_location\": \"\"}"),
                ACCEL_ERR_INVALID_ARGUMENT, "weights_location");
    snprintf(bad, sizeof bad, "{\"load_in_8bit\": true, \"weights_location\": \"%s\"}", folder("nowhere"));
    CHECK_FAILS(accel_model_quantize(e, bad), ACCEL_ERR_NOT_FOUND, "nowhere");
    accel_model_free(e);
    /* a checkpoint of another model: the first weight of another shape is named */
    CHECK_OK(accel_model_create_from_json("{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 32, "
                                          "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4}",
                                          &other));
    CHECK_OK(accel_model_save_pretrained(other, folder("other"), NULL));
    accel_model_free(other);
    e = NULL;
    CHECK_OK(accel_model_create_from_json(kSmallLlamaEmpty, &e));
    snprintf(bad, sizeof bad, "{\"load_in_8bit\": true, \"weights_location\": \"%s\"}", folder("other"));
    CHECK_FAILS(accel_model_quantize(e, bad), ACCEL_ERR_INVALID_ARGUMENT, "model.layers.0.self_attn.q_proj.weight");
    accel_model_free(e);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    int rc = 1;
    snprintf(g_dir, sizeof g_dir, "quantize_load_%ld", (long)getpid());
    CHECK(mkdir(g_dir, 0755) == 0);
    if (argc > 1 && strcmp(argv[1], "rss") == 0) rc = rss_main();
    else {
        test_empty_and_refused();
        test_weights_location();
        rc = capi_report("test_quantize_load");
    }
    nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
