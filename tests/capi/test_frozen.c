/* Frozen parameters (accel_model_set_requires_grad, the spec's "frozen"): globs, refusals (NULLs, a glob matching
 * nothing, calls after the optimizer or prepare), every spec model type, and training that leaves frozen
 * parameters' bytes alone with no gradient. With the argument "reference" (needs Python's torch): AdamW with
 * clipping over a partly frozen MLP against torch (frozen_reference.py): losses, clip_grad_norm totals over the
 * trainable parameters only, final weights, and save_state's optimizer.bin holding state for the trainable ones. */
#include "capi_helpers.h"

static bool trains(const accel_model_t *m, const char *name)
{
    bool v = true;
    CHECK_OK(accel_model_get_requires_grad(m, name, &v));
    return v;
}

/* The model's tensor `name` as float32 into buf (at most cap floats); returns its element count. */
static int64_t read_tensor(const accel_model_t *m, const char *name, float *buf, size_t cap)
{
    accel_tensor_t *t = NULL;
    int64_t n = 0;
    CHECK_OK(accel_model_get_tensor(m, name, &t));
    if (t == NULL) return 0;
    CHECK_OK(accel_tensor_get_numel(t, &n));
    CHECK((size_t)n <= cap);
    if ((size_t)n <= cap) CHECK_OK(accel_tensor_copy_to_buffer(t, buf, (size_t)n * sizeof(float)));
    accel_tensor_free(t);
    return n;
}

static void test_globs_and_refusals(void)
{
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_accelerator_t *acc = NULL;
    bool v = true;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 8, 8, 2]}", &m));
    CHECK(trains(m, "0.weight") && trains(m, "4.bias"));
    CHECK_OK(accel_model_set_requires_grad(m, "0.*", false));
    CHECK(!trains(m, "0.weight") && !trains(m, "0.bias") && trains(m, "2.weight"));
    CHECK_OK(accel_model_set_requires_grad(m, "*.bias", false)); /* `*` crosses dots */
    CHECK(!trains(m, "2.bias") && !trains(m, "4.bias") && trains(m, "4.weight"));
    CHECK_OK(accel_model_set_requires_grad(m, "2.bias", true)); /* a plain name; unfreezing */
    CHECK(trains(m, "2.bias"));

    CHECK_FAILS(accel_model_set_requires_grad(m, "encoder.*", false), ACCEL_ERR_INVALID_ARGUMENT, "\"encoder.*\" matches no parameter");
    CHECK_FAILS(accel_model_set_requires_grad(NULL, "0.*", false), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK_FAILS(accel_model_set_requires_grad(m, NULL, false), ACCEL_ERR_INVALID_ARGUMENT, "name_glob");
    CHECK_FAILS(accel_model_get_requires_grad(m, "0.weight", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_model_get_requires_grad(m, NULL, &v), ACCEL_ERR_INVALID_ARGUMENT, "name");
    CHECK_FAILS(accel_model_get_requires_grad(NULL, "0.weight", &v), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK_FAILS(accel_model_get_requires_grad(m, "9.weight", &v), ACCEL_ERR_NOT_FOUND, "9.weight");

    /* A param group that takes only frozen parameters takes none. */
    CHECK_FAILS(accel_optimizer_create(m, "{\"type\": \"sgd\", \"param_groups\": [{\"params\": [\"0.*\"]}, {}]}", &opt),
                ACCEL_ERR_INVALID_ARGUMENT, "param_groups[0].params: takes no trainable parameter");
    CHECK(opt == NULL);

    /* What trains is decided when the optimizer is built: changing it while one lives is refused. */
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    CHECK_FAILS(accel_model_set_requires_grad(m, "2.*", false), ACCEL_ERR_FAILED_PRECONDITION, "optimizer");
    CHECK(trains(m, "2.weight"));
    accel_optimizer_free(opt);
    opt = NULL;
    CHECK_OK(accel_model_set_requires_grad(m, "2.weight", false)); /* free again once it is gone */
    CHECK_OK(accel_model_set_requires_grad(m, "2.weight", true));

    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_prepare(acc, m, NULL, NULL, NULL));
    CHECK_FAILS(accel_model_set_requires_grad(m, "2.*", false), ACCEL_ERR_FAILED_PRECONDITION, "prepared");
    accel_accelerator_free(acc);
    accel_model_free(m);

    /* Everything frozen: nothing to optimize. */
    m = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 2], \"frozen\": \"*\"}", &m));
    CHECK_FAILS(accel_optimizer_create(m, "{\"type\": \"sgd\"}", &opt), ACCEL_ERR_INVALID_ARGUMENT, "no trainable parameters");
    accel_model_free(m);
}

/* "frozen" in the spec of each model type; bad values name the key. */
static void test_spec_key(void)
{
    accel_model_t *m = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 8, 2], \"frozen\": [\"0.weight\"]}", &m));
    CHECK(!trains(m, "0.weight") && trains(m, "0.bias"));
    accel_model_free(m);
    m = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"sequential\", \"frozen\": [\"0.self_attn.*\", \"1.*\"], \"layers\": ["
                                          "{\"type\": \"transformer_encoder_layer\", \"d_model\": 8, \"nhead\": 2,"
                                          " \"dim_feedforward\": 16}, {\"type\": \"linear\", \"in_features\": 8,"
                                          " \"out_features\": 2}]}", &m));
    CHECK(!trains(m, "0.self_attn.in_proj_weight") && !trains(m, "0.self_attn.out_proj.bias") && !trains(m, "1.weight"));
    CHECK(trains(m, "0.linear1.weight") && trains(m, "0.norm2.bias"));
    accel_model_free(m);
    m = NULL;
    /* A tied head's name means the token embedding it shares. */
    CHECK_OK(accel_model_create_from_json("{\"type\": \"gpt\", \"vocab_size\": 11, \"n_positions\": 8, \"n_embd\": 8,"
                                          " \"n_layer\": 1, \"n_head\": 2, \"frozen\": [\"lm_head.weight\", \"transformer.wpe.*\"]}", &m));
    CHECK(!trains(m, "transformer.wte.weight") && !trains(m, "transformer.wpe.weight") && trains(m, "transformer.ln_f.weight"));
    accel_model_free(m);
    m = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"llama\", \"vocab_size\": 29, \"hidden_size\": 16,"
                                          " \"intermediate_size\": 24, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                                          " \"num_key_value_heads\": 2, \"frozen\": [\"model.embed_tokens.weight\","
                                          " \"model.layers.0.*\"]}", &m));
    CHECK(!trains(m, "model.embed_tokens.weight") && !trains(m, "model.layers.0.self_attn.q_proj.weight"));
    CHECK(trains(m, "model.layers.1.mlp.down_proj.weight") && trains(m, "model.norm.weight"));
    accel_model_free(m);
    m = NULL;

    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 2], \"frozen\": [\"0.*\", \"head.*\"]}", &m),
                ACCEL_ERR_INVALID_ARGUMENT, "frozen[1]: \"head.*\" matches no parameter");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 2], \"frozen\": [3]}", &m),
                ACCEL_ERR_INVALID_ARGUMENT, "frozen[0]");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 2], \"frozen\": [\"\"]}", &m),
                ACCEL_ERR_INVALID_ARGUMENT, "frozen[0]");
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"gpt\", \"n_layer\": 1, \"frozen\": {}}", &m),
                ACCEL_ERR_INVALID_ARGUMENT, "frozen");
    CHECK(m == NULL);
}

#define TR_N 16

/* Frozen parameters keep their bytes through AdamW steps with weight decay and have no gradient. */
static void test_training_keeps_frozen(void)
{
    static float x[TR_N * 4], before[64], after[64];
    static int64_t y[TR_N];
    const int64_t xs[2] = {TR_N, 4}, ys[1] = {TR_N};
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *xt, *yt, *grad = NULL;
    int i, n;
    for (i = 0; i < TR_N * 4; ++i) x[i] = sinf(0.3f * (float)i);
    for (i = 0; i < TR_N; ++i) y[i] = i % 2;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 8, 2], \"frozen\": [\"0.weight\"]}", &m));
    n = (int)read_tensor(m, "0.weight", before, 64);
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.05, \"weight_decay\": 0.5}", &opt));
    xt = tensor_f32(x, xs, 2);
    yt = tensor_i64(y, ys, 1);
    CHECK_OK(accel_dataloader_create_from_tensors(xt, yt, "{\"batch_size\": 16}", &dl));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, dl, NULL));
    for (i = 0; i < 3; ++i) {
        accel_batch_t *b = NULL;
        double loss = 0;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) CHECK_OK(accel_dataloader_next(dl, &b));
        CHECK_OK(accel_accelerator_train_step(acc, m, opt, NULL, b, "cross_entropy", &loss));
        accel_batch_free(b);
    }
    CHECK_OK(accel_model_get_gradient(m, "0.weight", &grad));
    CHECK(grad == NULL);
    CHECK(read_tensor(m, "0.weight", after, 64) == n && memcmp(before, after, (size_t)n * sizeof(float)) == 0);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(xt);
    accel_tensor_free(yt);
    accel_accelerator_free(acc);
}

/* Sharded (FULL_SHARD, one process): frozen parameters stay whole and count in the memory statistics' parameter
 * bytes beside the trainable shards: 40 frozen + 18 trainable floats. */
static void test_sharded_memory(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    char *stats = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 8, 2], \"frozen\": [\"0.*\"]}", &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adam\"}", &opt));
    CHECK_OK(accel_accelerator_create("{\"cpu\": true, \"fsdp_plugin\": {}}", &acc)); /* sharding: CPU only yet */
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    CHECK_OK(accel_accelerator_get_memory_stats_json(acc, &stats));
    CHECK(json_int(stats, "parameter_bytes") == (40 + 18) * 4);
    if (json_int(stats, "parameter_bytes") != (40 + 18) * 4) fprintf(stderr, "stats: %s\n", stats);
    accel_string_free(stats);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* ---- against Python's torch ------------------------------------------------------------------------------ */

#define REF_N 32
#define REF_STEPS 6

static int test_reference(void)
{
    const char *py = getenv("ACCEL_PYTHON"), *script = getenv("ACCEL_FROZEN_REFERENCE");
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *xt = NULL, *yt = NULL;
    FILE *f, *g;
    char cmd[1200];
    int i;
    if (py == NULL || py[0] == '\0' || script == NULL) {
        fprintf(stderr, "test_frozen reference: ACCEL_PYTHON (with torch) and ACCEL_FROZEN_REFERENCE must be set\n");
        return 1;
    }
    mlp_reference_data("frozen_ref", REF_N, &xt, &yt);

    CHECK_OK(accel_random_set_seed(7, false, false));
    /* The first layer and the last bias frozen: trainable 2.weight, 2.bias, 4.weight. */
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [6, 16, 16, 3], \"frozen\": [\"0.*\", \"4.bias\"]}", &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.02, \"weight_decay\": 0.1}", &opt));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    CHECK_OK(accel_accelerator_save_model(acc, m, "frozen_ref/init", NULL));
    f = fopen("frozen_ref/losses.txt", "w");
    g = fopen("frozen_ref/norms.txt", "w");
    CHECK(f != NULL && g != NULL);
    for (i = 0; i < REF_STEPS && f != NULL && g != NULL; ++i) {
        accel_tensor_t *out = NULL, *loss = NULL;
        float value = 0;
        double norm = 0;
        CHECK_OK(accel_model_forward(m, xt, &out));
        CHECK_OK(accel_loss_compute("cross_entropy", out, yt, &loss));
        CHECK_OK(accel_tensor_copy_to_buffer(loss, &value, sizeof value));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_accelerator_clip_grad_norm(acc, m, 0.1, 2.0, &norm)); /* bites: norms are above 0.1 */
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        fprintf(f, "%a\n", (double)value);
        fprintf(g, "%a\n", norm);
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    if (f != NULL) fclose(f);
    if (g != NULL) fclose(g);
    CHECK_OK(accel_accelerator_save_state(acc, "frozen_ref/state"));
    snprintf(cmd, sizeof cmd, "'%s' '%s' frozen_ref %d", py, script, REF_STEPS);
    CHECK(system(cmd) == 0);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_tensor_free(xt);
    accel_tensor_free(yt);
    accel_accelerator_free(acc);
    return capi_report("test_frozen reference");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "reference") == 0) return test_reference();
    test_globs_and_refusals();
    test_spec_key();
    test_training_keeps_frozen();
    test_sharded_memory();
    return capi_report("test_frozen");
}
