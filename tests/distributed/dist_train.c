/*
 * dist_train OUT_FILE PER_PROCESS_BATCH STEPS ['<accelerator config JSON>']
 *
 * Trains a fixed MLP on a fixed data set (96 samples, no shuffling) with SGD for STEPS optimizer steps,
 * clipping gradients to a large norm each sync step. Rank 0 writes the final parameters (float32,
 * parameter order) followed by every total gradient norm (float64) to OUT_FILE. Started as P processes
 * with batch B it must produce the weights of one process with batch P*B.
 * The model widths come from ACCEL_TEST_WIDTHS ("8,32,32,4" by default). With ACCEL_TEST_GPT set, the model is
 * instead a tiny "gpt" (spec below; ACCEL_TEST_GPT=checkpointing adds activation checkpointing; ACCEL_TEST_GPT=llama
 * makes it a tiny "llama" with grouped-query attention and a tied head instead; ACCEL_TEST_GPT=lora gives the gpt
 * LoRA adapters on every linear layer, the rest frozen by the spec) trained with "causal_lm" on 96
 * windows of 8 tokens cut from a fixed token stream (accel_dataloader_create_from_tokens).
 * File datasets: with ACCEL_TEST_FILES=PREFIX the same data is written to files of each process's own
 * (PREFIX.<rank>.x.npy and .y.npy for the MLP, PREFIX.<rank>.bin as uint8 tokens for the gpt) and read back
 * with accel_dataloader_create_from_files.
 * Resume tests: with ACCEL_TEST_LOAD=DIR the run starts with load_state(DIR) after prepare (with
 * ACCEL_TEST_LOAD_MAY_FAIL set, a refusal is printed as "load_state refused: STATUS: message" and the run trains
 * no step and ends with status 0, so that every process's answer is seen); with
 * ACCEL_TEST_SAVE_AT=K and ACCEL_TEST_SAVE_DIR=DIR it calls save_state(DIR) after optimizer step K and stops;
 * with ACCEL_TEST_SAVE_ASYNC=1 too, the save is {"async": true} and training goes on to STEPS while the files
 * are written (then wait_for_checkpoint).
 * With ACCEL_TEST_FREE_AT=K it calls free_memory after step K and prepares the same objects again.
 * ACCEL_TEST_FROZEN="glob,glob" freezes those parameters (accel_model_set_requires_grad) before the optimizer is
 * created; rank 0 then checks that each frozen parameter ends with the bytes it had before prepare (its seed's,
 * which every rank must have been given; not under zero3_init_flag, where they cannot be read before prepare).
 * Sharding tests: ACCEL_TEST_OPTIMIZER (optimizer JSON), ACCEL_TEST_CLIP (max norm, default 1000),
 * ACCEL_TEST_SCHEDULER (scheduler JSON, prepared and stepped every step). ACCEL_TEST_ACCUMULATE_NO_MODEL=1
 * enters accumulate with no model (Accelerate's accumulate()): gradients are then all-reduced every micro-step. A sharded model's weights are
 * read between summon_full_params_begin/end (on every rank); every rank prints its memory statistics
 * taken after the last optimizer step ("memory stats: {...}").
 * Elastic restarts (tests/cli/test_elastic.py): with ACCEL_TEST_ELASTIC=1 (and automatic checkpoint naming in the
 * config) the run registers its step counter for checkpointing, starts with load_latest_state, and saves after
 * every optimizer step; ACCEL_TEST_DIE_AT=K with ACCEL_TEST_DIE_RANK=R makes rank R kill itself (SIGKILL) at step
 * K in the first round (TORCHELASTIC_RESTART_COUNT 0; every round with ACCEL_TEST_DIE_EVERY_ROUND set), before that
 * step's save, or after it with ACCEL_TEST_DIE_AFTER_SAVE=1. It prints "elastic: ..." lines with wall-clock times (the restart time).
 * Tensor parallelism (tests/distributed/run_tp.py): ACCEL_TEST_SAME_SEED=1 seeds every rank alike (tp builds the
 * model whole on every rank and slices it; nothing is broadcast over the tp group), ACCEL_TEST_GPT_HEADS sets
 * the gpt's n_head (4 for tp 4), ACCEL_TEST_SAVE_MODEL=DIR calls save_model(DIR) after training, and
 * ACCEL_TEST_GET_STATE_DICT=FILE writes get_state_dict's tensors to FILE (accel_accelerator_save) after that.
 * ACCEL_TEST_PRINT_LOSS=1: every rank prints each micro-batch's loss ("dist_train loss RANK VALUE").
 */
#include "dist_common.h"

#include <signal.h>
#include <string.h>
#include <time.h>

enum { N = 96, F = 8, C = 4 };

/* Writes a C-order .npy file (format 1.0) of `nbytes` bytes of data. */
static void dist_write_npy(const char *path, const char *descr, const char *shape, const void *data, size_t nbytes)
{
    char h[128];
    int len = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    while ((10 + len + 1) % 64 != 0) h[len++] = ' ';
    h[len++] = '\n';
    const unsigned char hlen[2] = {(unsigned char)(len & 0xff), (unsigned char)(len >> 8)};
    FILE *f = fopen(path, "wb");
    DIST_EXPECT(f != NULL && fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(hlen, 1, 2, f) == 2 &&
                    fwrite(h, 1, (size_t)len, f) == (size_t)len && fwrite(data, 1, nbytes, f) == nbytes && fclose(f) == 0,
                "cannot write %s", path);
}

/* A malloc'ed float32 copy of the model's tensor `name` (the bytes of a quantized weight, uint8 or int8, widened
   to floats one by one); NULL while it cannot be read (a model built partitioned under zero3_init_flag, before
   prepare). `out_n`, when not NULL, gets its element count. */
static float *dist_copy_tensor_n(const accel_model_t *model, const char *name, int64_t *out_n)
{
    accel_tensor_t *t = NULL;
    accel_dtype_t dtype = ACCEL_DTYPE_FLOAT32;
    const accel_status_t st = accel_model_get_tensor(model, name, &t);
    if (st == ACCEL_ERR_FAILED_PRECONDITION) return NULL;
    DIST_CHECK(st);
    const int64_t n = dist_numel(t);
    float *buf = malloc((size_t)n * sizeof(float));
    DIST_CHECK(accel_tensor_get_dtype(t, &dtype));
    if (dtype == ACCEL_DTYPE_UINT8 || dtype == ACCEL_DTYPE_INT8) {
        unsigned char *bytes = malloc((size_t)n);
        DIST_CHECK(accel_tensor_copy_to_buffer(t, bytes, (size_t)n));
        for (int64_t i = 0; i < n; ++i) buf[i] = dtype == ACCEL_DTYPE_INT8 ? (float)(signed char)bytes[i] : (float)bytes[i];
        free(bytes);
    } else {
        DIST_CHECK(accel_tensor_copy_to_buffer(t, buf, (size_t)n * sizeof(float)));
    }
    accel_tensor_free(t);
    if (out_n != NULL) *out_n = n;
    return buf;
}

static float *dist_copy_tensor(const accel_model_t *model, const char *name)
{
    return dist_copy_tensor_n(model, name, NULL);
}

/* ACCEL_TEST_ELASTIC: the optimizer steps done, saved with every checkpoint (register_for_checkpointing). */
static int g_done;
static char g_done_text[32];
static accel_status_t save_done(void *user_data, const uint8_t **out_data, size_t *out_len)
{
    (void)user_data;
    snprintf(g_done_text, sizeof g_done_text, "%d", g_done);
    *out_data = (const uint8_t *)g_done_text;
    *out_len = strlen(g_done_text);
    return ACCEL_OK;
}
static accel_status_t load_done(void *user_data, const uint8_t *data, size_t len)
{
    char text[32];
    (void)user_data;
    if (len == 0 || len >= sizeof text) return ACCEL_ERR_DATA_LOSS;
    memcpy(text, data, len);
    text[len] = '\0';
    g_done = atoi(text);
    return ACCEL_OK;
}
static double wall_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
/* Rank `rank` at step `done` of the first round: SIGKILL itself when ACCEL_TEST_DIE_* says so (after_save: the
   point after the step's save, else before it). */
static void elastic_maybe_die(int rank, int done, int after_save)
{
    const char *at = getenv("ACCEL_TEST_DIE_AT"), *who = getenv("ACCEL_TEST_DIE_RANK");
    const char *round = getenv("TORCHELASTIC_RESTART_COUNT");
    const int die_after_save = getenv("ACCEL_TEST_DIE_AFTER_SAVE") != NULL && atoi(getenv("ACCEL_TEST_DIE_AFTER_SAVE")) == 1;
    const int every_round = getenv("ACCEL_TEST_DIE_EVERY_ROUND") != NULL;
    if (at == NULL || who == NULL || round == NULL || (atoi(round) != 0 && !every_round)) return;
    if (atoi(at) != done || atoi(who) != rank || die_after_save != after_save) return;
    printf("elastic: rank %d killing itself at step %d %s its save at %.6f\n", rank, done,
           after_save ? "after" : "before", wall_seconds());
    fflush(stdout);
    raise(SIGKILL);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: dist_train OUT BATCH STEPS [CONFIG]\n");
        return 2;
    }
    const char *out_path = argv[1];
    int batch = atoi(argv[2]), steps = atoi(argv[3]);
    const char *config = argc > 4 ? argv[4] : NULL;
    const char *widths = getenv("ACCEL_TEST_WIDTHS") ? getenv("ACCEL_TEST_WIDTHS") : "8,32,32,4";

    static float x[N * F];
    static int64_t y[N];
    uint64_t s = 12345;
    for (int i = 0; i < N * F; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    for (int i = 0; i < N; ++i) y[i] = i % C;

    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_scheduler_t *sched = NULL;
    const char *opt_config = getenv("ACCEL_TEST_OPTIMIZER") ? getenv("ACCEL_TEST_OPTIMIZER")
                                                            : "{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}";
    const char *sched_config = getenv("ACCEL_TEST_SCHEDULER");
    const double clip = getenv("ACCEL_TEST_CLIP") ? atof(getenv("ACCEL_TEST_CLIP")) : 1000.0;
    char *memory = NULL;
    accel_tensor_t *features = NULL, *labels = NULL;
    const int64_t xs[2] = {N, F}, ys[1] = {N};
    char spec[1024], dl_config[128];
    /* ACCEL_TEST_SPEC: this JSON spec instead of the MLP (features [N, F] -> C classes; e.g. one with a tp_plan); it
     * wins over ACCEL_TEST_GPT. With ACCEL_TEST_SPEC_TOKENS=1 too it takes the gpt's data instead (windows of 8 token
     * ids, "causal_lm"): a language model of the spec's layers. */
    const char *own_spec = getenv("ACCEL_TEST_SPEC");
    const char *gpt = own_spec != NULL ? NULL : getenv("ACCEL_TEST_GPT");
    const int token_data = gpt != NULL || (own_spec != NULL && getenv("ACCEL_TEST_SPEC_TOKENS") != NULL);
    static int64_t tokens[N * 8 + 1];
    const int64_t token_count = N * 8 + 1;
    snprintf(spec, sizeof spec, "{\"type\": \"mlp\", \"widths\": [%s], \"activation\": \"tanh\"}", widths);
    if (own_spec != NULL) snprintf(spec, sizeof spec, "%s", own_spec);
    snprintf(dl_config, sizeof dl_config, "{\"batch_size\": %d, \"shuffle\": true, \"seed\": 7}", batch);
    if (gpt != NULL) {
        /* The tied head shares transformer.wte.weight: DDP must keep one tensor, reduced once. */
        /* ACCEL_TEST_GPT_DROPOUT "embd,resid,attn": those dropout probabilities (0 by default). */
        double embd = 0.0, resid = 0.0, attn = 0.0;
        if (getenv("ACCEL_TEST_GPT_DROPOUT") != NULL)
            sscanf(getenv("ACCEL_TEST_GPT_DROPOUT"), "%lf,%lf,%lf", &embd, &resid, &attn);
        snprintf(spec, sizeof spec,
                 "{\"type\": \"gpt\", \"vocab_size\": 11, \"n_positions\": 8, \"n_embd\": 8, \"n_layer\": 2,"
                 " \"n_head\": %d, \"resid_pdrop\": %g, \"embd_pdrop\": %g, \"attn_pdrop\": %g,"
                 " \"activation_checkpointing\": %s}", getenv("ACCEL_TEST_GPT_HEADS") ? atoi(getenv("ACCEL_TEST_GPT_HEADS")) : 2,
                 resid, embd, attn, strcmp(gpt, "checkpointing") == 0 ? "true" : "false");
        if (strcmp(gpt, "llama") == 0) /* ACCEL_TEST_GPT_HEADS / ACCEL_TEST_KV_HEADS: 4 / 2 for tensor parallelism */
            snprintf(spec, sizeof spec,
                     "{\"type\": \"llama\", \"vocab_size\": 11, \"hidden_size\": 8, \"intermediate_size\": 12,"
                     " \"num_hidden_layers\": 2, \"num_attention_heads\": %d, \"num_key_value_heads\": %d,"
                     " \"tie_word_embeddings\": true, \"initializer_range\": 0.2}",
                     getenv("ACCEL_TEST_GPT_HEADS") ? atoi(getenv("ACCEL_TEST_GPT_HEADS")) : 2,
                     getenv("ACCEL_TEST_KV_HEADS") ? atoi(getenv("ACCEL_TEST_KV_HEADS")) : 1);
        if (strcmp(gpt, "lora") == 0) /* adapters on every linear layer; the spec freezes the rest */
            snprintf(spec, sizeof spec,
                     "{\"type\": \"gpt\", \"vocab_size\": 11, \"n_positions\": 8, \"n_embd\": 8, \"n_layer\": 2,"
                     " \"n_head\": 2, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0,"
                     " \"lora\": {\"r\": 2, \"lora_alpha\": 4, \"target_modules\": \"all-linear\"}}");
    }
    if (token_data) {
        snprintf(dl_config, sizeof dl_config, "{\"block_size\": 8, \"batch_size\": %d, \"shuffle\": true, \"seed\": 7}",
                 batch);
        for (int64_t i = 0; i < token_count; ++i) tokens[i] = (i * 7 + i / 5) % 11;
    }

    /* Different seeds on every rank: DDP must broadcast rank 0's initial weights. */
    int32_t rank = 0;
    DIST_CHECK(accel_process_get_index(&rank));
    DIST_CHECK(accel_random_set_seed(1000 + (getenv("ACCEL_TEST_SAME_SEED") ? 0 : (uint64_t)rank), false, false));
    DIST_CHECK(accel_accelerator_create(config, &acc));
    DIST_CHECK(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &features));
    DIST_CHECK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &labels));
    DIST_CHECK(accel_model_create_from_json(spec, &model));
    /* ACCEL_TEST_QUANTIZE: a BnbQuantizationConfig applied before prepare (QLoRA with the lora gpt: adapters over
       a 4-bit base); each rank quantizes its own draw, so rank 0's quantized base must reach every rank. */
    if (getenv("ACCEL_TEST_QUANTIZE") != NULL) DIST_CHECK(accel_model_quantize(model, getenv("ACCEL_TEST_QUANTIZE")));
    float *frozen_before[64] = {NULL};
    /* Frozen: the parameters of ACCEL_TEST_FROZEN's globs, or the base of a LoRA model (frozen by its spec). */
    const int lora = gpt != NULL && strcmp(gpt, "lora") == 0;
    if (getenv("ACCEL_TEST_FROZEN") != NULL || lora) {
        char globs[512];
        snprintf(globs, sizeof globs, "%s", lora ? "" : getenv("ACCEL_TEST_FROZEN"));
        for (char *g = strtok(globs, ","); g != NULL; g = strtok(NULL, ",")) DIST_CHECK(accel_model_set_requires_grad(model, g, false));
        size_t count = 0;
        DIST_CHECK(accel_model_get_num_parameters(model, &count));
        DIST_EXPECT(count <= 64, "too many parameters (%zu) for the frozen check", count);
        for (size_t i = 0; i < count; ++i) {
            const char *name = NULL;
            bool trains = true;
            DIST_CHECK(accel_model_get_parameter_name(model, i, &name));
            DIST_CHECK(accel_model_get_requires_grad(model, name, &trains));
            if (!trains) frozen_before[i] = dist_copy_tensor(model, name);
        }
    }
    DIST_CHECK(accel_optimizer_create(model, opt_config, &opt));
    if (sched_config != NULL) DIST_CHECK(accel_scheduler_create(opt, sched_config, &sched));
    const char *files = getenv("ACCEL_TEST_FILES");
    if (files != NULL) {
        /* The same samples from files on disk: the loader's options are dl_config's. */
        char x_path[400], y_path[400], files_config[1000];
        if (token_data) {
            unsigned char bytes[N * 8 + 1];
            for (int64_t i = 0; i < token_count; ++i) bytes[i] = (unsigned char)tokens[i];
            snprintf(x_path, sizeof x_path, "%s.%d.bin", files, (int)rank);
            FILE *f = fopen(x_path, "wb");
            DIST_EXPECT(f != NULL && fwrite(bytes, 1, sizeof bytes, f) == sizeof bytes && fclose(f) == 0, "cannot write %s", x_path);
            snprintf(files_config, sizeof files_config, "{\"format\": \"tokens\", \"files\": \"%s\", \"dtype\": \"uint8\", %s",
                     x_path, dl_config + 1);
        } else {
            char shape[32];
            snprintf(x_path, sizeof x_path, "%s.%d.x.npy", files, (int)rank);
            snprintf(y_path, sizeof y_path, "%s.%d.y.npy", files, (int)rank);
            snprintf(shape, sizeof shape, "(%d, %d)", N, F);
            dist_write_npy(x_path, "<f4", shape, x, sizeof x);
            snprintf(shape, sizeof shape, "(%d,)", N);
            dist_write_npy(y_path, "<i8", shape, y, sizeof y);
            snprintf(files_config, sizeof files_config, "{\"format\": \"npy\", \"features\": \"%s\", \"labels\": \"%s\", %s",
                     x_path, y_path, dl_config + 1);
        }
        DIST_CHECK(accel_dataloader_create_from_files(files_config, &dl));
    } else if (token_data) {
        accel_tensor_t *stream = NULL;
        DIST_CHECK(accel_tensor_create(tokens, sizeof tokens, ACCEL_DTYPE_INT64, &token_count, 1, &stream));
        DIST_CHECK(accel_dataloader_create_from_tokens(stream, dl_config, &dl));
        accel_tensor_free(stream);
    } else {
        DIST_CHECK(accel_dataloader_create_from_tensors(features, labels, dl_config, &dl));
    }
    DIST_CHECK(accel_accelerator_prepare(acc, model, opt, dl, sched));
    const char *load_dir = getenv("ACCEL_TEST_LOAD"), *save_dir = getenv("ACCEL_TEST_SAVE_DIR");
    const int save_at = getenv("ACCEL_TEST_SAVE_AT") ? atoi(getenv("ACCEL_TEST_SAVE_AT")) : -1;
    const int save_async = getenv("ACCEL_TEST_SAVE_ASYNC") != NULL && atoi(getenv("ACCEL_TEST_SAVE_ASYNC")) == 1;
    const int free_at = getenv("ACCEL_TEST_FREE_AT") ? atoi(getenv("ACCEL_TEST_FREE_AT")) : -1;
    /* Saved at save_at, trained on for reload_after steps (the state changes in place), then the checkpoint
       loaded back into the same objects, and on from save_at: must equal never having left it. */
    const int reload_after = getenv("ACCEL_TEST_RELOAD_AFTER") ? atoi(getenv("ACCEL_TEST_RELOAD_AFTER")) : -1;
    int reload_at = -1, norms_at_save = 0, saved = 0;
    if (load_dir != NULL && getenv("ACCEL_TEST_LOAD_MAY_FAIL") != NULL) {
        /* A refused checkpoint is this run's result (every process must report it alike): say so, end cleanly. */
        const accel_status_t st = accel_accelerator_load_state(acc, load_dir);
        if (st != ACCEL_OK) {
            printf("load_state refused: %s: %s\n", accel_status_name(st), accel_last_error_message());
            fflush(stdout);
            steps = 0; /* no training; the run ends as usual */
        }
    } else if (load_dir != NULL) {
        DIST_CHECK(accel_accelerator_load_state(acc, load_dir));
    }
    const int elastic = getenv("ACCEL_TEST_ELASTIC") != NULL && atoi(getenv("ACCEL_TEST_ELASTIC")) == 1;
    const int print_loss = getenv("ACCEL_TEST_PRINT_LOSS") != NULL;
    int report_first_step = 0;
    if (elastic) {
        int32_t index = -1;
        bool found = false;
        DIST_CHECK(accel_accelerator_register_for_checkpointing(acc, save_done, load_done, NULL, &index));
        g_done = 0;
        DIST_CHECK(accel_accelerator_load_latest_state(acc, &found));
        printf("elastic: round %s of max %s, run id %s: %s at step %d\n", getenv("TORCHELASTIC_RESTART_COUNT"),
               getenv("TORCHELASTIC_MAX_RESTARTS"), getenv("TORCHELASTIC_RUN_ID"), found ? "resumed" : "fresh start",
               g_done);
        fflush(stdout);
        report_first_step = found;
    }

    double norms[1024];
    int num_norms = 0, done = elastic ? g_done : 0;
    while (done < steps) {
        accel_batch_t *b = NULL;
        DIST_CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL)
            continue; /* next epoch */
        accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
        bool sync = false;
        DIST_CHECK(accel_accelerator_accumulate_begin(acc, getenv("ACCEL_TEST_ACCUMULATE_NO_MODEL") ? NULL : model));
        DIST_CHECK(accel_batch_get_inputs(b, &in));
        DIST_CHECK(accel_batch_get_labels(b, &lab));
        DIST_CHECK(accel_model_forward(model, in, &out));
        DIST_CHECK(accel_loss_compute(token_data ? "causal_lm" : "cross_entropy", out, lab, &loss));
        if (print_loss) { /* every micro-batch's loss on this rank's rows (run_tp.py averages the data-parallel ranks) */
            double value = 0.0;
            DIST_CHECK(accel_tensor_get_item(loss, &value));
            printf("dist_train loss %d %.9e\n", rank, value);
            fflush(stdout);
        }
        DIST_CHECK(accel_accelerator_backward(acc, loss));
        DIST_CHECK(accel_accelerator_get_sync_gradients(acc, &sync));
        if (sync) {
            double norm = 0.0;
            DIST_CHECK(accel_accelerator_clip_grad_norm(acc, model, clip, 2.0, &norm));
            if (num_norms < 1024) norms[num_norms++] = norm;
            ++done;
        }
        DIST_CHECK(accel_optimizer_step(opt));
        if (sched != NULL) DIST_CHECK(accel_scheduler_step(sched));
        if (sync && done == steps) DIST_CHECK(accel_accelerator_get_memory_stats_json(acc, &memory));
        DIST_CHECK(accel_optimizer_zero_grad(opt));
        DIST_CHECK(accel_accelerator_accumulate_end(acc));
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_tensor_free(out);
        accel_tensor_free(loss);
        accel_batch_free(b);
        if (sync && done == free_at) { /* Accelerate's free_memory between trainings, then the same objects again */
            DIST_CHECK(accel_accelerator_free_memory(acc));
            DIST_CHECK(accel_accelerator_prepare(acc, model, opt, dl, sched));
        }
        if (sync && done == reload_at) {
            DIST_CHECK(accel_accelerator_load_state(acc, save_dir));
            done = save_at;
            num_norms = norms_at_save;
            reload_at = -1;
            continue;
        }
        if (sync && elastic) {
            if (report_first_step) {
                printf("elastic: first step after resume (step %d) done at %.6f\n", done, wall_seconds());
                fflush(stdout);
                report_first_step = 0;
            }
            elastic_maybe_die(rank, done, 0);
            g_done = done;
            DIST_CHECK(accel_accelerator_save_state(acc, NULL));
            elastic_maybe_die(rank, done, 1);
        }
        if (sync && done == save_at && !saved) {
            DIST_EXPECT(save_dir != NULL, "ACCEL_TEST_SAVE_AT needs ACCEL_TEST_SAVE_DIR");
            saved = 1;
            if (save_async) {
                DIST_CHECK(accel_accelerator_save_state_with_options(acc, save_dir, "{\"async\": true}", NULL));
                continue; /* the next steps change the state while it is written */
            }
            DIST_CHECK(accel_accelerator_save_state(acc, save_dir));
            if (reload_after > 0) {
                reload_at = done + reload_after;
                norms_at_save = num_norms;
                continue;
            }
            break;
        }
    }
    DIST_CHECK(accel_accelerator_wait_for_checkpoint(acc));
    if (getenv("ACCEL_TEST_SAVE_MODEL") != NULL) DIST_CHECK(accel_accelerator_save_model(acc, model, getenv("ACCEL_TEST_SAVE_MODEL"), NULL));
    if (getenv("ACCEL_TEST_GET_STATE_DICT") != NULL) { /* get_state_dict in one call, written by process 0 */
        accel_state_dict_t *sd = NULL;
        size_t n = 0;
        DIST_CHECK(accel_accelerator_get_state_dict(acc, model, NULL, &sd));
        DIST_CHECK(accel_state_dict_get_count(sd, &n));
        const char **keys = calloc(n + 1, sizeof *keys);
        accel_tensor_t **tensors = calloc(n + 1, sizeof *tensors);
        DIST_EXPECT(keys != NULL && tensors != NULL, "out of memory");
        for (size_t i = 0; i < n; ++i) {
            DIST_CHECK(accel_state_dict_get_key(sd, i, &keys[i]));
            DIST_CHECK(accel_state_dict_get_tensor(sd, i, &tensors[i]));
        }
        DIST_CHECK(accel_accelerator_save(acc, keys, (const accel_tensor_t *const *)tensors, n, getenv("ACCEL_TEST_GET_STATE_DICT")));
        for (size_t i = 0; i < n; ++i) accel_tensor_free(tensors[i]);
        free(tensors);
        free(keys);
        accel_state_dict_free(sd);
    }

    /* A sharded model's parameters are whole only between summon_full_params_begin and _end. */
    accel_status_t summon = accel_accelerator_summon_full_params_begin(acc, model);
    DIST_EXPECT(summon == ACCEL_OK || summon == ACCEL_ERR_FAILED_PRECONDITION, "summon_full_params_begin: %s",
                accel_last_error_message());
    if (memory != NULL) {
        printf("memory stats: %s\n", memory);
        accel_string_free(memory);
    }
    if (rank == 0) {
        FILE *f = fopen(out_path, "wb");
        DIST_EXPECT(f != NULL, "cannot write %s", out_path);
        size_t count = 0;
        DIST_CHECK(accel_model_get_num_parameters(model, &count));
        for (size_t i = 0; i < count; ++i) {
            const char *name = NULL;
            int64_t n = 0;
            DIST_CHECK(accel_model_get_parameter_name(model, i, &name));
            float *buf = dist_copy_tensor_n(model, name, &n);
            DIST_EXPECT(frozen_before[i] == NULL || memcmp(frozen_before[i], buf, (size_t)n * sizeof(float)) == 0,
                        "frozen parameter %s changed in training", name);
            free(frozen_before[i]);
            fwrite(buf, sizeof(float), (size_t)n, f);
            free(buf);
        }
        if (gpt != NULL) { /* still one tensor under two names */
            accel_tensor_t *head = NULL, *wte = NULL;
            static float a[11 * 8], b[11 * 8];
            DIST_CHECK(accel_model_get_tensor(model, "lm_head.weight", &head));
            DIST_CHECK(accel_model_get_tensor(model, strcmp(gpt, "llama") == 0 ? "model.embed_tokens.weight"
                                                                               : "transformer.wte.weight", &wte));
            /* Under tensor parallelism: this rank's rows of the (padded) vocabulary, fewer than 11. */
            const size_t bytes = (size_t)dist_numel(wte) * sizeof(float);
            DIST_EXPECT(bytes <= sizeof a, "the token embedding holds %zu bytes", bytes);
            DIST_CHECK(accel_tensor_copy_to_buffer(head, a, bytes));
            DIST_CHECK(accel_tensor_copy_to_buffer(wte, b, bytes));
            DIST_EXPECT(memcmp(a, b, bytes) == 0, "lm_head.weight differs from the token embedding");
            accel_tensor_free(head);
            accel_tensor_free(wte);
        }
        fwrite(norms, sizeof(double), (size_t)num_norms, f);
        fclose(f);
        char *stats = NULL;
        DIST_CHECK(accel_accelerator_get_ddp_stats_json(acc, &stats));
        printf("ddp stats: %s\n", stats);
        accel_string_free(stats);
        DIST_CHECK(accel_accelerator_get_parallel_ranks_json(acc, &stats));
        printf("parallel ranks: %s\n", stats);
        accel_string_free(stats);
    }
    if (summon == ACCEL_OK) DIST_CHECK(accel_accelerator_summon_full_params_end(acc, model));
    accel_scheduler_free(sched);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(features);
    accel_tensor_free(labels);
    accel_accelerator_free(acc);
    return 0;
}
