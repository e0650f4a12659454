/* accel/checkpoint.h, accel_accelerator_get_state_dict in one process: the keys of the model's state dict in its
 * order (parameters, then buffers) with the values accel_model_get_tensor reads, bit for bit; copies (a training
 * step afterwards leaves them, and a tensor taken from the dict outlives it); a model sharded by fsdp_plugin or
 * deepspeed_plugin gathered for the call and sharded again after it (one the user summoned stays summoned); a
 * LoRA model's adapter names; an unprepared model; and bad arguments named. The 2-process behaviour (rank0_only,
 * DDP's "module.") is tests/distributed/dist_state_dict.c's. */
#define _POSIX_C_SOURCE 200809L
#include "capi_helpers.h"

/* Parameters and buffers (batch_norm's running statistics, one of them int64). */
static const char *kSpec = "{\"type\": \"sequential\", \"layers\": ["
                           "{\"type\": \"linear\", \"in_features\": 6, \"out_features\": 16},"
                           "{\"type\": \"batch_norm\", \"num_features\": 16},"
                           "{\"type\": \"tanh\"},"
                           "{\"type\": \"linear\", \"in_features\": 16, \"out_features\": 3}]}";

/* A copy of the bytes of `t` (free it). */
static void *bytes_of(const accel_tensor_t *t, size_t *n)
{
    *n = 0;
    CHECK_OK(accel_tensor_get_nbytes(t, n));
    void *buf = malloc(*n ? *n : 1);
    CHECK_OK(accel_tensor_copy_to_buffer(t, buf, *n));
    return buf;
}

/* Whether `a` and `b` have the same dtype, shape and bytes. */
static int same_tensor_bits(const accel_tensor_t *a, const accel_tensor_t *b)
{
    accel_dtype_t da = -1, db = -2;
    size_t na = 0, nb = 0, nda = 0, ndb = 0;
    int64_t sa[8], sb[8];
    CHECK_OK(accel_tensor_get_dtype(a, &da));
    CHECK_OK(accel_tensor_get_dtype(b, &db));
    CHECK_OK(accel_tensor_get_ndim(a, &nda));
    CHECK_OK(accel_tensor_get_ndim(b, &ndb));
    if (da != db || nda != ndb || nda > 8) return 0;
    CHECK_OK(accel_tensor_get_shape(a, sa, nda));
    CHECK_OK(accel_tensor_get_shape(b, sb, ndb));
    if (nda != 0 && memcmp(sa, sb, nda * sizeof(int64_t)) != 0) return 0;
    void *ba = bytes_of(a, &na), *bb = bytes_of(b, &nb);
    const int same = na == nb && memcmp(ba, bb, na) == 0;
    free(ba);
    free(bb);
    return same;
}

/* The number of entries of `sd` that differ from the model's state dict (keys in order, values bit for bit);
 * a different count counts as one. The model must be readable (summoned when sharded). */
static int differences_from_model(const accel_state_dict_t *sd, const accel_model_t *m)
{
    size_t count = 0, want = 0, i;
    int bad = 0;
    CHECK_OK(accel_state_dict_get_count(sd, &count));
    CHECK_OK(accel_model_get_state_dict_size(m, &want));
    if (count != want) return 1;
    for (i = 0; i < count; ++i) {
        const char *key = NULL, *model_key = NULL;
        accel_tensor_t *t = NULL, *ref = NULL;
        CHECK_OK(accel_state_dict_get_key(sd, i, &key));
        CHECK_OK(accel_model_get_state_dict_key(m, i, &model_key));
        if (key == NULL || model_key == NULL || strcmp(key, model_key) != 0) {
            ++bad;
            continue;
        }
        CHECK_OK(accel_state_dict_get_tensor(sd, i, &t));
        CHECK_OK(accel_model_get_tensor(m, key, &ref));
        if (t == NULL || ref == NULL || !same_tensor_bits(t, ref)) ++bad;
        accel_tensor_free(t);
        accel_tensor_free(ref);
    }
    return bad;
}

/* One optimizer step on a fixed batch of 8 rows (train mode: batch_norm's statistics move too). */
static void train_step(accel_accelerator_t *acc, accel_model_t *m, accel_optimizer_t *opt)
{
    float x[8 * 6], y[8 * 3];
    int i;
    for (i = 0; i < 8 * 6; ++i) x[i] = (float)sin(0.37 * (double)i);
    for (i = 0; i < 8 * 3; ++i) y[i] = (float)cos(0.21 * (double)i);
    accel_tensor_t *tx = matrix_f32(x, 8, 6), *ty = matrix_f32(y, 8, 3), *out = NULL, *loss = NULL;
    CHECK_OK(accel_model_forward(m, tx, &out));
    CHECK_OK(accel_loss_compute("mse", out, ty, &loss));
    CHECK_OK(accel_accelerator_backward(acc, loss));
    CHECK_OK(accel_optimizer_step(opt));
    CHECK_OK(accel_optimizer_zero_grad(opt));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    accel_tensor_free(out);
    accel_tensor_free(loss);
}

static void test_plain(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_state_dict_t *sd = NULL;
    accel_tensor_t *first = NULL, *now = NULL, *before = NULL;
    size_t count = 0;
    const char *key = NULL;
    CHECK_OK(accel_random_set_seed(5, false, false));
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.05}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    train_step(acc, m, opt);

    CHECK_OK(accel_accelerator_get_state_dict(acc, m, NULL, &sd));
    CHECK_OK(accel_state_dict_get_count(sd, &count));
    CHECK(count == 9); /* 6 parameters, then running_mean, running_var, num_batches_tracked */
    CHECK_OK(accel_state_dict_get_key(sd, 8, &key));
    CHECK(key != NULL && strcmp(key, "1.num_batches_tracked") == 0);
    CHECK(differences_from_model(sd, m) == 0);

    /* Copies: training on changes the model, not the dict, nor a tensor taken from it, which outlives it. */
    CHECK_OK(accel_state_dict_get_tensor(sd, 0, &first));
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &before));
    train_step(acc, m, opt);
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &now));
    CHECK(!same_tensor_bits(now, before));
    CHECK(same_tensor_bits(first, before));
    CHECK(differences_from_model(sd, m) > 0);
    accel_state_dict_free(sd);
    CHECK(same_tensor_bits(first, before));

    /* unwrap false: one process has no DDP wrapper, so the keys are the model's own. */
    sd = NULL;
    CHECK_OK(accel_accelerator_get_state_dict(acc, m, "{\"unwrap\": false, \"rank0_only\": null}", &sd));
    CHECK(differences_from_model(sd, m) == 0);
    accel_state_dict_free(sd);

    accel_tensor_free(first);
    accel_tensor_free(now);
    accel_tensor_free(before);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* One process under a sharding plugin: gathered for the call, sharded again after it. */
static void test_sharded(const char *config, int params_sharded)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_state_dict_t *sd = NULL, *inside = NULL;
    accel_tensor_t *t = NULL;
    CHECK_OK(accel_random_set_seed(5, false, false));
    CHECK_OK(accel_accelerator_create(config, &acc));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.05}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    train_step(acc, m, opt);

    CHECK_OK(accel_accelerator_get_state_dict(acc, m, NULL, &sd)); /* process 0 of 1: rank0_only keeps it */
    if (params_sharded) /* back to the shards: reading the model needs a summon again */
        CHECK_FAILS(accel_model_get_tensor(m, "0.weight", &t), ACCEL_ERR_FAILED_PRECONDITION, "summon_full_params");
    accel_tensor_free(t);
    CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    CHECK(differences_from_model(sd, m) == 0);
    /* Summoned by the user: read as it is, and still summoned afterwards. */
    CHECK_OK(accel_accelerator_get_state_dict(acc, m, "{\"rank0_only\": false}", &inside));
    CHECK(differences_from_model(inside, m) == 0);
    CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    train_step(acc, m, opt); /* training goes on */
    accel_state_dict_free(sd);
    accel_state_dict_free(inside);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

/* LoRA: the adapters under PEFT's names, the frozen base weights beside them, as save_model writes them. */
static void test_lora(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_state_dict_t *sd = NULL;
    size_t count = 0, i;
    int adapters = 0;
    CHECK_OK(accel_accelerator_create("{\"fsdp_plugin\": {}}", &acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"gpt\", \"vocab_size\": 11, \"n_positions\": 8, \"n_embd\": 8,"
                                          " \"n_layer\": 1, \"n_head\": 2, \"lora\": {\"r\": 2, \"target_modules\":"
                                          " [\"c_attn\"]}}",
                                          &m));
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_accelerator_get_state_dict(acc, m, NULL, &sd));
    CHECK_OK(accel_state_dict_get_count(sd, &count));
    for (i = 0; i < count; ++i) {
        const char *key = NULL;
        CHECK_OK(accel_state_dict_get_key(sd, i, &key));
        adapters += key != NULL && (strcmp(key, "transformer.h.0.attn.c_attn.lora_A.weight") == 0 ||
                                    strcmp(key, "transformer.h.0.attn.c_attn.lora_B.weight") == 0);
    }
    CHECK(adapters == 2);
    CHECK_OK(accel_accelerator_summon_full_params_begin(acc, m));
    CHECK(differences_from_model(sd, m) == 0);
    CHECK_OK(accel_accelerator_summon_full_params_end(acc, m));
    accel_state_dict_free(sd);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

static void test_errors(void)
{
    accel_accelerator_t *acc = NULL, *other = NULL;
    accel_model_t *m = NULL;
    accel_state_dict_t *sd = NULL;
    accel_tensor_t *t = NULL;
    const char *key = "x";
    size_t count = 7;
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_create(NULL, &other));
    CHECK_OK(accel_model_create_from_json(kSpec, &m));

    /* Not prepared: its state dict as it is. */
    CHECK_OK(accel_accelerator_get_state_dict(acc, m, "{}", &sd));
    CHECK(differences_from_model(sd, m) == 0);
    CHECK_FAILS(accel_state_dict_get_key(sd, 9, &key), ACCEL_ERR_OUT_OF_RANGE, "9 is beyond the state dict's 9");
    CHECK(key == NULL);
    CHECK_FAILS(accel_state_dict_get_tensor(sd, 9, &t), ACCEL_ERR_OUT_OF_RANGE, "index");
    CHECK(t == NULL);
    CHECK_FAILS(accel_state_dict_get_key(sd, 0, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    accel_state_dict_free(sd);
    sd = NULL;

    CHECK_FAILS(accel_accelerator_get_state_dict(NULL, m, NULL, &sd), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_state_dict(acc, NULL, NULL, &sd), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK_FAILS(accel_accelerator_get_state_dict(acc, m, NULL, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_state_dict(acc, m, "{\"rank0_onl\": true}", &sd), ACCEL_ERR_INVALID_ARGUMENT,
                "rank0_onl");
    CHECK_FAILS(accel_accelerator_get_state_dict(acc, m, "{\"unwrap\": 1}", &sd), ACCEL_ERR_INVALID_ARGUMENT,
                "unwrap");
    CHECK_FAILS(accel_accelerator_get_state_dict(acc, m, "{\"unwrap\": ", &sd), ACCEL_ERR_INVALID_ARGUMENT,
                "options_json");
    CHECK(sd == NULL);
    CHECK_OK(accel_accelerator_prepare_model(other, m));
    CHECK_FAILS(accel_accelerator_get_state_dict(acc, m, NULL, &sd), ACCEL_ERR_FAILED_PRECONDITION,
                "prepared by another accelerator");
    CHECK(sd == NULL);
    CHECK_FAILS(accel_state_dict_get_count(NULL, &count), ACCEL_ERR_INVALID_ARGUMENT, "state_dict");
    CHECK(count == 0);
    accel_state_dict_free(NULL);
    accel_model_free(m);
    accel_accelerator_free(other);
    accel_accelerator_free(acc);
}

int main(void)
{
    test_plain();
    test_sharded("{\"fsdp_plugin\": {\"sharding_strategy\": \"FULL_SHARD\"}}", 1);
    test_sharded("{\"fsdp_plugin\": {\"sharding_strategy\": \"SHARD_GRAD_OP\"}}", 1);
    test_sharded("{\"fsdp_plugin\": {\"sharding_strategy\": \"NO_SHARD\"}}", 0);
    test_sharded("{\"deepspeed_plugin\": {\"zero_stage\": 2}}", 0);
    test_sharded("{\"deepspeed_plugin\": {\"zero_stage\": 3}}", 1);
    test_lora();
    test_errors();
    return capi_report("test_state_dict");
}
