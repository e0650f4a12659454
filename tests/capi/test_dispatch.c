/*
 * accel_model_dispatch / accel_model_load_checkpoint_and_dispatch (accel/dispatch.h): a llama and a GPT model with
 * every module on disk, or half of them, give the same logits and generated tokens as in memory, bit for bit
 * (fp32); a second dispatch reads an existing offload folder as the weights; what a dispatched model cannot do
 * is refused by name; a damaged folder is DATA_LOSS naming the file.
 *
 *   capi_test_dispatch        the tests above
 *   capi_test_dispatch rss    (its own process, so that nothing else has grown the heap) the peak resident set
 *                             while generating with every module on disk stays within layer 0 (embeddings + head,
 *                             which the forward seam holds for the whole forward) + the largest block + the KV
 *                             cache + 8 MiB, far below the whole model
 */
#define _XOPEN_SOURCE 700
#include "capi_helpers.h"

#include <ftw.h>
#include <unistd.h>

static const char *kLlama = "{\"type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, \"intermediate_size\": 96,"
                            " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                            " \"initializer_range\": 0.3}";
static const char *kGpt = "{\"type\": \"gpt\", \"vocab_size\": 97, \"n_positions\": 32, \"n_embd\": 32,"
                          " \"n_layer\": 3, \"n_head\": 4}";
static const char *kHalf = "{\"model.embed_tokens\": \"disk\", \"model.layers.0\": \"cpu\", \"model.layers.1\": \"disk\","
                           " \"model.layers.2\": \"cpu\", \"model.layers.3\": \"disk\", \"model.norm\": \"cpu\","
                           " \"lm_head\": \"cpu\"}";

enum { B = 2, T = 5, NEW = 9, MAX_LOGITS = B * T * 300 };

typedef struct {
    float logits[MAX_LOGITS];
    int64_t tokens[B * (T + NEW)];
    int64_t n_logits;
} outputs_t;

static char g_dir[256];

static const char *folder(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    return path;
}

static accel_model_t *seeded(const char *spec, uint64_t seed)
{
    accel_model_t *m = NULL;
    CHECK_OK(accel_random_set_seed(seed, false, false));
    CHECK_OK(accel_model_create_from_json(spec, &m));
    CHECK_OK(accel_model_eval(m)); /* no dropout: outputs comparable bit for bit */
    return m;
}

static void run(accel_model_t *m, outputs_t *o)
{
    int64_t prompt[B * T] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, shape[2] = {B, T};
    accel_tensor_t *x = tensor_i64(prompt, shape, 2), *y = NULL, *g = NULL;
    memset(o, 0, sizeof *o);
    CHECK_OK(accel_model_forward_no_grad(m, x, &y));
    o->n_logits = numel_of(y);
    CHECK(o->n_logits > 0 && o->n_logits <= MAX_LOGITS);
    if (o->n_logits > 0 && o->n_logits <= MAX_LOGITS) read_f32(y, o->logits, (size_t)o->n_logits);
    CHECK_OK(accel_model_generate(m, x, "{\"max_new_tokens\": 9}", &g));
    CHECK(numel_of(g) == B * (T + NEW));
    if (numel_of(g) == B * (T + NEW)) CHECK_OK(accel_tensor_copy_to_buffer(g, o->tokens, sizeof o->tokens));
    accel_tensor_free(g);
    accel_tensor_free(y);
    accel_tensor_free(x);
}

static int same(const outputs_t *a, const outputs_t *b)
{
    return a->n_logits == b->n_logits && memcmp(a->logits, b->logits, sizeof a->logits) == 0 &&
           memcmp(a->tokens, b->tokens, sizeof a->tokens) == 0;
}

/* The same weights dispatched by `map` compute what they computed in memory. */
static void check_dispatched_equals(const char *spec, const char *map, const char *dir_name)
{
    static outputs_t want, got;
    char options[1200];
    accel_model_t *m = seeded(spec, 7);
    run(m, &want);
    snprintf(options, sizeof options, "{\"offload_dir\": \"%s\"}", folder(dir_name));
    CHECK_OK(accel_model_dispatch(m, map, options));
    run(m, &got);
    CHECK(same(&want, &got));
    run(m, &got); /* again: the weights were released after the first forwards and are read again */
    CHECK(same(&want, &got));
    accel_model_free(m);
}

static void test_equal_to_memory(void)
{
    static outputs_t want, got;
    char options[1200];
    accel_model_t *m;
    int i, distinct = 0;
    check_dispatched_equals(kLlama, "{\"\": \"disk\"}", "llama_all");
    check_dispatched_equals(kLlama, kHalf, "llama_half");
    check_dispatched_equals(kGpt, "{\"\": \"disk\"}", "gpt_all");
    check_dispatched_equals(kGpt, "{\"transformer.wte\": \"cpu\", \"transformer.h.1\": \"disk\", \"\": \"cpu\"}", "gpt_part");

    /* An existing folder is the source of the weights (Accelerate's rule): a model with other weights dispatched
       on llama_all computes what the seed-7 model did; the outputs differ in memory, so the test can tell. */
    m = seeded(kLlama, 7);
    run(m, &want);
    accel_model_free(m);
    m = seeded(kLlama, 8);
    run(m, &got);
    CHECK(!same(&want, &got));
    for (i = 1; i < B * (T + NEW); ++i) distinct += want.tokens[i] != want.tokens[i - 1];
    CHECK(distinct > 4);
    snprintf(options, sizeof options, "{\"offload_folder\": \"%s\"}", folder("llama_all"));
    CHECK_OK(accel_model_dispatch(m, "{\"\": \"disk\"}", options));
    run(m, &got);
    CHECK(same(&want, &got));
    accel_model_free(m);
}

static void test_load_checkpoint_and_dispatch(void)
{
    static outputs_t want, got;
    char options[1400];
    accel_model_t *m = seeded(kLlama, 7);
    run(m, &want);
    CHECK_OK(accel_model_save_pretrained(m, folder("ckpt"), NULL));
    accel_model_free(m);
    m = seeded(kLlama, 9);
    snprintf(options, sizeof options, "{\"device_map\": %s, \"offload_folder\": \"%s\"}", kHalf, folder("ckpt_offload"));
    CHECK_OK(accel_model_load_checkpoint_and_dispatch(m, folder("ckpt/model.safetensors"), options));
    run(m, &got);
    CHECK(same(&want, &got));
    CHECK_FAILS(accel_model_load_checkpoint_and_dispatch(m, folder("ckpt"), NULL), ACCEL_ERR_FAILED_PRECONDITION,
                "dispatched");
    accel_model_free(m);
    /* An empty (meta) model and a computed map: a CPU budget too small for the model puts the rest on disk. */
    {
        char spec[600], index[1400];
        FILE *f;
        size_t len = strlen(kLlama);
        memcpy(spec, kLlama, len - 1);
        snprintf(spec + len - 1, sizeof spec - (len - 1), ", \"empty_init\": true}");
        CHECK_OK(accel_model_create_from_json(spec, &m));
        CHECK_OK(accel_model_eval(m));
        snprintf(options, sizeof options,
                 "{\"device_map\": \"auto\", \"max_memory\": {\"cpu\": 200000}, \"offload_folder\": \"%s\"}",
                 folder("auto_offload"));
        CHECK_OK(accel_model_load_checkpoint_and_dispatch(m, folder("ckpt/model.safetensors"), options));
        run(m, &got);
        CHECK(same(&want, &got));
        snprintf(index, sizeof index, "%s/index.json", folder("auto_offload"));
        f = fopen(index, "r");
        CHECK(f != NULL); /* some modules went to disk */
        if (f != NULL) fclose(f);
        accel_model_free(m);
    }
    m = seeded(kLlama, 9);
    CHECK_FAILS(accel_model_load_checkpoint_and_dispatch(m, folder("ckpt"), "{\"device_map\": \"fastest\"}"),
                ACCEL_ERR_INVALID_ARGUMENT, "device_map");
    CHECK_FAILS(accel_model_load_checkpoint_and_dispatch(m, folder("ckpt"), "{\"max_memory\": {\"cpu\": 1}}"),
                ACCEL_ERR_INVALID_ARGUMENT, "max_memory");
    CHECK_FAILS(accel_model_load_checkpoint_and_dispatch(m, "", NULL), ACCEL_ERR_INVALID_ARGUMENT, "checkpoint_path");
    CHECK_FAILS(accel_model_load_checkpoint_and_dispatch(m, folder("ckpt"), "{\"offload_folde\": 1}"),
                ACCEL_ERR_INVALID_ARGUMENT, "offload_folde");
    accel_model_free(m);
}

static void test_refusals(void)
{
    char options[1200], path[1200];
    int64_t prompt[T] = {1, 2, 3, 4, 5}, shape[1] = {T};
    accel_tensor_t *x = tensor_i64(prompt, shape, 1), *y = NULL;
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = seeded(kLlama, 7);
    FILE *f;
    CHECK_FAILS(accel_model_dispatch(m, "{\"\": \"disk\"}", NULL), ACCEL_ERR_INVALID_ARGUMENT, "offload_dir");
    CHECK_FAILS(accel_model_dispatch(m, "{\"model.layers\": \"disk\"}", "{\"offload_dir\": \"/tmp/x\"}"),
                ACCEL_ERR_INVALID_ARGUMENT, "model.embed_tokens.weight");
    CHECK_FAILS(accel_model_dispatch(m, "{\"\": 0}", NULL), ACCEL_ERR_UNIMPLEMENTED, "GPU");
    CHECK_FAILS(accel_model_dispatch(m, "{\"\": \"cpu\"}", "{\"main_device\": \"cuda:0\"}"), ACCEL_ERR_UNIMPLEMENTED,
                "main_device");
    CHECK_FAILS(accel_model_dispatch(m, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "device_map_json");
    CHECK_FAILS(accel_model_dispatch(NULL, "{}", NULL), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK_OK(accel_model_dispatch(m, "{\"\": \"cpu\"}", NULL)); /* all in memory: nothing to do */
    snprintf(options, sizeof options, "{\"offload_dir\": \"%s\"}", folder("refusals"));
    CHECK_OK(accel_model_dispatch(m, kHalf, options));
    CHECK_FAILS(accel_model_dispatch(m, kHalf, options), ACCEL_ERR_FAILED_PRECONDITION, "already dispatched");
    CHECK_FAILS(accel_model_forward(m, x, &y), ACCEL_ERR_FAILED_PRECONDITION, "without gradients");
    CHECK_FAILS(accel_model_get_tensor(m, "model.layers.1.mlp.up_proj.weight", &y), ACCEL_ERR_FAILED_PRECONDITION,
                "dispatched");
    CHECK_OK(accel_accelerator_create("{\"cpu\": true}", &acc));
    CHECK_FAILS(accel_accelerator_prepare_model(acc, m), ACCEL_ERR_FAILED_PRECONDITION, "dispatched");
    accel_accelerator_free(acc);
    accel_model_free(m);

    /* A damaged folder: a .dat cut short is DATA_LOSS naming it. */
    snprintf(path, sizeof path, "%s/model.layers.1.mlp.up_proj.weight.dat", folder("refusals"));
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f != NULL) fclose(f);
    m = seeded(kLlama, 7);
    CHECK_FAILS(accel_model_dispatch(m, kHalf, options), ACCEL_ERR_DATA_LOSS, "up_proj.weight.dat");
    accel_model_free(m);
    accel_tensor_free(x);
}

/* offload_buffers: a batch_norm's running statistics are read from the folder with its module. A model whose
 * statistics were updated writes the folder; a fresh model of the same weights dispatched on that folder computes
 * the updated model's outputs with offload_buffers (its buffers come from the folder, bit for bit), and its own
 * without (its buffers stay in memory). */
static void test_offload_buffers(void)
{
    static const char *spec = "{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", \"in_features\": 4,"
                              " \"out_features\": 6}, {\"type\": \"batch_norm\", \"num_features\": 6, \"dims\": 1},"
                              " {\"type\": \"linear\", \"in_features\": 6, \"out_features\": 3}]}";
    const float xs[8] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, 0.75f, -0.5f, 3.0f};
    const int64_t shape[2] = {2, 4};
    float updated[6], fresh[6], got[6];
    char with[1200], without[1200];
    accel_tensor_t *x = tensor_f32(xs, shape, 2), *y = NULL;
    accel_model_t *a = seeded(spec, 11), *b = NULL, *c = NULL;
    CHECK_OK(accel_model_forward_no_grad(a, x, &y)); /* eval: the initial statistics */
    if (y != NULL) CHECK(read_f32(y, fresh, 6) == 0);
    accel_tensor_free(y);
    CHECK_OK(accel_model_train(a));
    CHECK_OK(accel_model_forward_no_grad(a, x, &y)); /* train mode: running statistics updated */
    accel_tensor_free(y);
    CHECK_OK(accel_model_eval(a));
    CHECK_OK(accel_model_forward_no_grad(a, x, &y));
    if (y != NULL) CHECK(read_f32(y, updated, 6) == 0);
    accel_tensor_free(y);
    CHECK(memcmp(updated, fresh, sizeof fresh) != 0);
    snprintf(with, sizeof with, "{\"offload_dir\": \"%s\", \"offload_buffers\": true}", folder("buffers"));
    snprintf(without, sizeof without, "{\"offload_dir\": \"%s\"}", folder("buffers"));
    CHECK_OK(accel_model_dispatch(a, "{\"\": \"disk\"}", with));
    CHECK_OK(accel_model_forward_no_grad(a, x, &y));
    if (y != NULL) CHECK(read_f32(y, got, 6) == 0 && memcmp(got, updated, sizeof got) == 0);
    accel_tensor_free(y);
    b = seeded(spec, 11);
    CHECK_OK(accel_model_dispatch(b, "{\"\": \"disk\"}", with));
    CHECK_OK(accel_model_forward_no_grad(b, x, &y));
    if (y != NULL) CHECK(read_f32(y, got, 6) == 0 && memcmp(got, updated, sizeof got) == 0);
    accel_tensor_free(y);
    c = seeded(spec, 11);
    CHECK_OK(accel_model_dispatch(c, "{\"\": \"disk\"}", without));
    CHECK_OK(accel_model_forward_no_grad(c, x, &y));
    if (y != NULL) CHECK(read_f32(y, got, 6) == 0 && memcmp(got, fresh, sizeof got) == 0);
    accel_tensor_free(y);
    accel_model_free(c);
    accel_model_free(b);
    accel_model_free(a);
    accel_tensor_free(x);
}

/* Peak RSS of generation with every module on disk, in a process of its own (see the top). */
static int rss_main(void)
{
    /* 16 blocks of 4 * 256^2 + 3 * 256 * 1024 floats (4.2 MB each), embeddings and head 4000 x 256 each (4.1 MB). */
    const char *spec = "{\"type\": \"llama\", \"vocab_size\": 4000, \"hidden_size\": 256, \"intermediate_size\": 1024,"
                       " \"num_hidden_layers\": 16, \"num_attention_heads\": 4, \"max_position_embeddings\": 64}";
    const double mib = 1024.0 * 1024.0;
    const double block = (4.0 * 256 * 256 + 3.0 * 256 * 1024 + 2 * 256) * 4 / mib;
    const double layer0 = (2.0 * 4000 * 256 + 256) * 4 / mib;
    const double whole = 16 * block + layer0;
    const int64_t prompt[8] = {3, 1, 4, 1, 5, 9, 2, 6}, shape[2] = {1, 8};
    const int new_tokens = 32;
    /* keys and values of every layer, float32, for 8 + 32 positions */
    const double kv = 2.0 * 16 * (8 + new_tokens) * 256 * 4 / mib;
    const double margin = 8.0;
    accel_model_t *m = seeded(spec, 1);
    accel_tensor_t *x = tensor_i64(prompt, shape, 2), *g = NULL;
    char options[1200];
    double before, peak, after_dispatch, built;
    built = status_mib("VmRSS:");
    snprintf(options, sizeof options, "{\"offload_dir\": \"%s\"}", folder("rss"));
    CHECK_OK(accel_model_dispatch(m, "{\"\": \"disk\"}", options));
    after_dispatch = status_mib("VmRSS:");
    /* A first generation sets up what any run would (BLAS buffers, LibTorch's first-use state): measured after. */
    CHECK_OK(accel_model_generate(m, x, "{\"max_new_tokens\": 2}", &g));
    accel_tensor_free(g);
    g = NULL;
    before = status_mib("VmRSS:");
    reset_peak_rss();
    CHECK_OK(accel_model_generate(m, x, "{\"max_new_tokens\": 32}", &g));
    peak = status_mib("VmHWM:") - before;
    printf("whole model %.1f MiB; RSS built %.1f, after dispatch %.1f, before generating %.1f MiB; peak while "
           "generating %.1f MiB above it "
           "(bound: layer 0 %.1f + block %.1f + KV cache %.2f + margin %.0f = %.1f MiB)\n",
           whole, built, after_dispatch, before, peak, layer0, block, kv, margin, layer0 + block + kv + margin);
    CHECK(built - after_dispatch > 0.8 * whole); /* the offloaded weights left memory */
    CHECK(peak > 0 && peak <= layer0 + block + kv + margin);
    CHECK(peak < 0.5 * whole);
    accel_tensor_free(g);
    accel_tensor_free(x);
    accel_model_free(m);
    return capi_report("capi_test_dispatch rss");
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
    int rc;
    snprintf(g_dir, sizeof g_dir, "dispatch_%ld", (long)getpid());
    if (argc > 1 && strcmp(argv[1], "rss") == 0) {
        rc = rss_main();
    } else {
        test_equal_to_memory();
        test_load_checkpoint_and_dispatch();
        test_refusals();
        test_offload_buffers();
        rc = capi_report("capi_test_dispatch");
    }
    nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
