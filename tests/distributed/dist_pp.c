/*
 * dist_pp OUT_PREFIX PER_PROCESS_BATCH STEPS ['<accelerator config JSON>']
 *
 * Pipeline parallelism over processes (tests/distributed/run_pp.py): a tiny "gpt" (4 blocks, tied head) trained
 * with accel_accelerator_train_step (the pipeline's schedule under pp_size > 1) and AdamW on 8-token windows of a
 * fixed token stream, every rank seeded alike (each stage builds its blocks as one process draws them). Each rank
 * writes OUT_PREFIX.<rank>.txt: "built N" (the parameter elements the model held as built, before prepare: under
 * pp its stage's only), one line "loss STEP VALUE" per step (%.9g), then "param NAME V..." for every
 * parameter it holds (a stage's others have no elements). run_pp.py merges the ranks' files and compares them
 * with one process's. ACCEL_TEST_SAVE_MODEL=DIR calls save_model(DIR) after training; ACCEL_TEST_SAVE_AT=K with
 * ACCEL_TEST_SAVE_DIR=DIR calls save_state(DIR) after step K; ACCEL_TEST_LOAD=DIR starts with load_state(DIR).
 * After training every rank also writes "logits V..." (accel_model_forward_no_grad of a fixed 3 x 5 prompt) and
 * "tokens V..." (accel_model_generate, 3 greedy tokens): under pp both run through the stages, on every rank.
 * ACCEL_TEST_CP=1 (pp x cp: a forward takes each rank's part of a sequence, not the whole prompt): no logits;
 * generation runs whole, as under cp alone.
 * ACCEL_TEST_LLAMA=1: the model is a tiny llama (4 layers, grouped-query attention, tied head) instead.
 * ACCEL_TEST_SEQUENTIAL=1: a JSON-spec sequential model instead (an embedding, three batch-first transformer layers,
 * a linear head; its stage boundaries carry their shapes): no tokens (generation is the gpt's and llama's). Its
 * q/k/v biases are frozen: the key bias's gradient is rounding noise (softmax ignores a constant added to every score),
 * which AdamW turns into steps of 1e-5 that differ with the summation order. Its transformer layers' "tp_plan": "auto"
 * splits them by heads under tp_size > 1 (pp x tp of a spec), and is not read otherwise.
 * After training every rank writes "sd NAME V..." for each float32 entry of get_state_dict (rank0_only false: the
 * whole model on every rank), which run_pp.py compares as parameters (every rank's copy the same bit for bit);
 * rank0_only true must give process 0 the same tensors and the others nothing.
 * ACCEL_TEST_SHARDED=1 (pp x sharding): the forward runs sharded, generation and the parameters' reading while
 * summoned (each stage's shards gathered).
 * ACCEL_TEST_SUMMON=1: generation and the parameters' reading summoned, for a sharded model without a pipeline.
 */
#include "dist_common.h"

#include <string.h>

enum { WINDOWS = 96, BLOCK = 8, VOCAB = 37 };

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: dist_pp OUT_PREFIX BATCH STEPS [CONFIG]\n");
        return 2;
    }
    const char *prefix = argv[1];
    const int batch = atoi(argv[2]), steps = atoi(argv[3]);
    const char *config = argc > 4 ? argv[4] : NULL;
    static int64_t tokens[WINDOWS * BLOCK + 1];
    const int64_t count = WINDOWS * BLOCK + 1;
    for (int64_t i = 0; i < count; ++i) tokens[i] = (i * 7 + i / 5 + (i * i) % 13) % VOCAB;
    const char *gpt = "{\"type\": \"gpt\", \"vocab_size\": 37, \"n_positions\": 8, \"n_embd\": 16, \"n_layer\": 4,"
                      " \"n_head\": 2, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}";
    /* ACCEL_TEST_LLAMA=1: a llama (grouped-query attention, tied head) instead. */
    const char *llama = "{\"type\": \"llama\", \"vocab_size\": 37, \"hidden_size\": 16, \"intermediate_size\": 24,"
                        " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                        " \"max_position_embeddings\": 16, \"tie_word_embeddings\": true}";
    const char *sequential =
        "{\"type\": \"sequential\", \"layers\": [{\"type\": \"embedding\", \"num_embeddings\": 37, \"embedding_dim\": 16},"
        " {\"type\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 4, \"dim_feedforward\": 32, \"dropout\": 0.0, \"batch_first\": true, \"tp_plan\": \"auto\"},"
        " {\"type\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 4, \"dim_feedforward\": 32, \"dropout\": 0.0, \"batch_first\": true, \"tp_plan\": \"auto\"},"
        " {\"type\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 4, \"dim_feedforward\": 32, \"dropout\": 0.0, \"batch_first\": true, \"tp_plan\": \"auto\"},"
        " {\"type\": \"linear\", \"in_features\": 16, \"out_features\": 37}], \"frozen\": \"*.self_attn.in_proj_bias\"}";
    const int is_sequential = getenv("ACCEL_TEST_SEQUENTIAL") != NULL;
    const char *spec = is_sequential ? sequential : getenv("ACCEL_TEST_LLAMA") != NULL ? llama : gpt;
    char dl_config[128];
    snprintf(dl_config, sizeof dl_config, "{\"block_size\": %d, \"batch_size\": %d, \"shuffle\": true, \"seed\": 7}", BLOCK,
             batch);

    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *stream = NULL;
    int32_t rank = 0;
    DIST_CHECK(accel_process_get_index(&rank));
    DIST_CHECK(accel_random_set_seed(1000, false, false));
    DIST_CHECK(accel_accelerator_create(config, &acc));
    DIST_CHECK(accel_model_create_from_json(spec, &model));
    int64_t built = 0; /* the parameter elements this rank holds as built: its stage's only (stage_init.hpp) */
    DIST_CHECK(accel_model_get_parameter_numel(model, &built));
    /* eps 1e-6: the key bias's gradient is rounding noise (softmax ignores a constant added to every score),
       which a smaller eps turns into full-size steps that differ between runs summing in another order. */
    DIST_CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.003, \"weight_decay\": 0.01, \"eps\": 1e-6}",
                                      &opt));
    DIST_CHECK(accel_tensor_create(tokens, sizeof tokens, ACCEL_DTYPE_INT64, &count, 1, &stream));
    DIST_CHECK(accel_dataloader_create_from_tokens(stream, dl_config, &dl));
    accel_tensor_free(stream);
    DIST_CHECK(accel_accelerator_prepare(acc, model, opt, dl, NULL));
    if (getenv("ACCEL_TEST_LOAD") != NULL) DIST_CHECK(accel_accelerator_load_state(acc, getenv("ACCEL_TEST_LOAD")));
    const int save_at = getenv("ACCEL_TEST_SAVE_AT") ? atoi(getenv("ACCEL_TEST_SAVE_AT")) : -1;

    char path[512];
    snprintf(path, sizeof path, "%s.%d.txt", prefix, (int)rank);
    FILE *f = fopen(path, "w");
    DIST_EXPECT(f != NULL, "cannot write %s", path);
    fprintf(f, "built %lld\n", (long long)built);
    for (int done = 0; done < steps;) {
        accel_batch_t *b = NULL;
        DIST_CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) continue; /* next epoch */
        double loss = 0.0;
        DIST_CHECK(accel_accelerator_train_step(acc, model, opt, NULL, b, "causal_lm", &loss));
        accel_batch_free(b);
        fprintf(f, "loss %d %.9g\n", done, loss);
        ++done;
        if (done == save_at) {
            DIST_EXPECT(getenv("ACCEL_TEST_SAVE_DIR") != NULL, "ACCEL_TEST_SAVE_AT needs ACCEL_TEST_SAVE_DIR");
            DIST_CHECK(accel_accelerator_save_state(acc, getenv("ACCEL_TEST_SAVE_DIR")));
        }
    }
    const int sharded = getenv("ACCEL_TEST_SHARDED") != NULL;
    const int summon = sharded || getenv("ACCEL_TEST_SUMMON") != NULL; /* a sharded model without a pipeline */
    if (getenv("ACCEL_TEST_SAVE_MODEL") != NULL)
        DIST_CHECK(accel_accelerator_save_model(acc, model, getenv("ACCEL_TEST_SAVE_MODEL"), NULL));
    {
        /* get_state_dict: the whole model on every rank; rank0_only: on process 0 alone (the pipeline fills in the
           main process's stage only), bit for bit the same tensors, the other ranks an empty dict. Under pp x
           sharding the engine gathers each stage's shards first (rank0_only is FSDP's default there). */
        accel_state_dict_t *all = NULL, *main_only = NULL;
        size_t n_all = 0, n_main = 0;
        DIST_CHECK(accel_accelerator_get_state_dict(acc, model, "{\"rank0_only\": false}", &all));
        DIST_CHECK(accel_accelerator_get_state_dict(acc, model, "{\"rank0_only\": true}", &main_only));
        DIST_CHECK(accel_state_dict_get_count(all, &n_all));
        DIST_CHECK(accel_state_dict_get_count(main_only, &n_main));
        DIST_EXPECT(rank == 0 ? n_main == n_all && n_all > 0 : n_main == 0, "get_state_dict rank0_only: %zu of %zu entries",
                    n_main, n_all);
        for (size_t i = 0; i < n_main; ++i) {
            accel_tensor_t *a = NULL, *b = NULL;
            size_t na = 0, nb = 0;
            DIST_CHECK(accel_state_dict_get_tensor(all, i, &a));
            DIST_CHECK(accel_state_dict_get_tensor(main_only, i, &b));
            DIST_CHECK(accel_tensor_get_nbytes(a, &na));
            DIST_CHECK(accel_tensor_get_nbytes(b, &nb));
            char *x = malloc(na + 1), *y = malloc(nb + 1);
            DIST_EXPECT(x != NULL && y != NULL && na == nb, "get_state_dict rank0_only: entry %zu has %zu bytes, %zu whole", i,
                        nb, na);
            DIST_CHECK(accel_tensor_copy_to_buffer(a, x, na));
            DIST_CHECK(accel_tensor_copy_to_buffer(b, y, nb));
            DIST_EXPECT(memcmp(x, y, na) == 0, "get_state_dict rank0_only: entry %zu differs from the whole dict's", i);
            free(x);
            free(y);
            accel_tensor_free(a);
            accel_tensor_free(b);
        }
        for (size_t i = 0; i < n_all; ++i) {
            const char *key = NULL;
            accel_tensor_t *t = NULL;
            accel_dtype_t dtype = ACCEL_DTYPE_FLOAT32;
            DIST_CHECK(accel_state_dict_get_key(all, i, &key));
            DIST_CHECK(accel_state_dict_get_tensor(all, i, &t));
            DIST_CHECK(accel_tensor_get_dtype(t, &dtype));
            const int64_t numel = dist_numel(t);
            if (dtype == ACCEL_DTYPE_FLOAT32 && numel > 0) {
                float *buf = malloc((size_t)numel * sizeof(float));
                DIST_EXPECT(buf != NULL, "out of memory");
                DIST_CHECK(accel_tensor_copy_to_buffer(t, buf, (size_t)numel * sizeof(float)));
                fprintf(f, "sd %s", key);
                for (int64_t k = 0; k < numel; ++k) fprintf(f, " %.9g", buf[k]);
                fprintf(f, "\n");
                free(buf);
            }
            accel_tensor_free(t);
        }
        accel_state_dict_free(all);
        accel_state_dict_free(main_only);
    }
    {
        static const int64_t prompt[15] = {1, 5, 9, 2, 7, 3, 3, 8, 0, 36, 11, 4, 6, 20, 2};
        const int64_t shape[2] = {3, 5};
        accel_tensor_t *in = NULL, *logits = NULL, *tokens = NULL;
        DIST_CHECK(accel_tensor_create(prompt, sizeof prompt, ACCEL_DTYPE_INT64, shape, 2, &in));
        if (getenv("ACCEL_TEST_CP") == NULL) {
            DIST_CHECK(accel_model_forward_no_grad(model, in, &logits));
            const int64_t nl = dist_numel(logits);
            float *buf = malloc((size_t)nl * sizeof(float));
            DIST_EXPECT(buf != NULL, "out of memory");
            DIST_CHECK(accel_tensor_copy_to_buffer(logits, buf, (size_t)nl * sizeof(float)));
            fprintf(f, "logits");
            for (int64_t k = 0; k < nl; ++k) fprintf(f, " %.9g", buf[k]);
            fprintf(f, "\n");
            free(buf);
        }
        /* Generation reads the stages' parameters whole, as of any sharded model: summoned till the end. */
        if (summon) DIST_CHECK(accel_accelerator_summon_full_params_begin(acc, model));
        if (!is_sequential) {
            DIST_CHECK(accel_model_generate(model, in, "{\"max_new_tokens\": 3}", &tokens));
            const int64_t nt = dist_numel(tokens);
            int64_t ids[32];
            DIST_EXPECT(nt <= 32, "%lld tokens", (long long)nt);
            DIST_CHECK(accel_tensor_copy_to_buffer(tokens, ids, (size_t)nt * sizeof(int64_t)));
            fprintf(f, "tokens");
            for (int64_t k = 0; k < nt; ++k) fprintf(f, " %lld", (long long)ids[k]);
            fprintf(f, "\n");
        }
        accel_tensor_free(tokens);
        accel_tensor_free(logits);
        accel_tensor_free(in);
    }
    size_t n = 0;
    DIST_CHECK(accel_model_get_num_parameters(model, &n));
    for (size_t i = 0; i < n; ++i) {
        const char *name = NULL;
        accel_tensor_t *p = NULL;
        DIST_CHECK(accel_model_get_parameter_name(model, i, &name));
        DIST_CHECK(accel_model_get_tensor(model, name, &p));
        const int64_t numel = dist_numel(p);
        if (numel > 0) {
            float *buf = malloc((size_t)numel * sizeof(float));
            DIST_EXPECT(buf != NULL, "out of memory");
            DIST_CHECK(accel_tensor_copy_to_buffer(p, buf, (size_t)numel * sizeof(float)));
            fprintf(f, "param %s", name);
            for (int64_t k = 0; k < numel; ++k) fprintf(f, " %.9g", buf[k]);
            fprintf(f, "\n");
            free(buf);
        }
        accel_tensor_free(p);
    }
    if (summon) DIST_CHECK(accel_accelerator_summon_full_params_end(acc, model));
    DIST_EXPECT(fclose(f) == 0, "cannot write %s", path);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
