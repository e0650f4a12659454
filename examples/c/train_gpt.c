/*
 * Train a character-level GPT on the licence texts Debian ships (/usr/share/common-licenses) through
 * accel's C API, with periodic validation, save_state / resume, and a few lines of sampled text.
 *
 *   ./train_gpt [--steps N] [--eval-every N] [--max-val-loss X] [--save DIR] [--save-every N]
 *               [--stop-at N] [--resume DIR] [--text-dir DIR | --tokens DIR] [--config '<accelerator config JSON>']
 *   (--config '{"log_with": "tensorboard", "project_config": {"logging_dir": "runs"}}' logs every step's loss
 *   and learning rate to runs/train_gpt/; on a terminal the main process draws a progress bar)
 *
 * The text is every regular file of --text-dir (symbolic links skipped, names sorted), bytes as
 * characters; the last 10 % is the validation split. With --tokens DIR it trains instead from token files that
 * prepare_tokens.py wrote from that text (DIR/train.bin, DIR/val.bin: one uint8 character id per character,
 * DIR/vocab.bin: the characters), read without loading them (accel_dataloader_create_from_files), as a
 * corpus larger than memory is read; the samples, and so the losses, are those of the text (the test
 * example.train_gpt_token_file compares them). The model is a 4-layer GPT-2 ({"type": "gpt"},
 * n_embd 128, 4 heads, 128 positions) trained with AdamW and a cosine schedule on windows of 128
 * characters (accel_dataloader_create_from_tokens) with the "causal_lm" loss. Every --eval-every steps
 * it prints the mean training loss and the validation loss (the whole split, every rank). With --save DIR,
 * the state is saved (accel_accelerator_save_state) as DIR/step_<N> every --save-every steps and when the
 * run stops; --stop-at N stops a run planned for --steps after step N (an interruption), and
 * --resume DIR/step_<N> continues it exactly where it stopped (weights, optimizer, schedule, data order
 * and random state; the step comes from the folder's name, as in Accelerate's examples), given the same
 * --steps. The program ends by
 * generating text from a prompt (greedy, then top-k sampling with a fixed seed) and exits non-zero if
 * the final validation loss is above --max-val-loss.
 *
 * Under `accel launch -n 2 ./train_gpt` each process trains on its shard of every global batch
 * (data-parallel, per-process batch 16) with no change to this program.
 */
#include <accel/accel.h>

#include "progress.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { BLOCK = 128, BATCH = 16, EVAL_BATCH = 32, MAX_FILES = 256 };

static int failed(accel_status_t st, const char *what)
{
    if (st == ACCEL_OK)
        return 0;
    fprintf(stderr, "train_gpt: %s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
    return 1;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file of `dir`, in name order, concatenated. */
static unsigned char *read_texts(const char *dir, size_t *out_len)
{
    char *names[MAX_FILES], path[4096];
    size_t count = 0, len = 0, cap = 1 << 20, i;
    unsigned char *text = malloc(cap);
    DIR *d = opendir(dir);
    struct dirent *e;
    if (d == NULL || text == NULL) {
        fprintf(stderr, "train_gpt: cannot read %s\n", dir);
        if (d != NULL) closedir(d);
        free(text);
        return NULL;
    }
    while ((e = readdir(d)) != NULL && count < MAX_FILES) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && lstat(path, &st) == 0 && S_ISREG(st.st_mode)) names[count++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, count, sizeof names[0], by_name);
    for (i = 0; i < count; ++i) {
        FILE *f;
        size_t n;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        free(names[i]);
        if ((f = fopen(path, "rb")) == NULL) continue;
        while ((n = fread(text + len, 1, cap - len, f)) > 0) {
            len += n;
            if (len == cap) {
                unsigned char *bigger = realloc(text, cap *= 2);
                if (bigger == NULL) {
                    fclose(f);
                    free(text);
                    return NULL;
                }
                text = bigger;
            }
        }
        fclose(f);
    }
    *out_len = len;
    return text;
}

/* A token loader with the loader keys `keys`: over `tokens` in memory, or over the uint8 token file `file`
 * when it is not NULL (--tokens). */
static accel_status_t token_loader(accel_tensor_t *tokens, const char *file, const char *keys, accel_dataloader_t **out)
{
    char json[4500];
    if (file == NULL) {
        snprintf(json, sizeof json, "{%s}", keys);
        return accel_dataloader_create_from_tokens(tokens, json, out);
    }
    snprintf(json, sizeof json, "{\"format\": \"tokens\", \"files\": \"%s\", \"dtype\": \"uint8\", %s}", file, keys);
    return accel_dataloader_create_from_files(json, out);
}

/* Mean causal_lm loss over a whole split (every window of BLOCK + 1 characters, stride BLOCK). */
static int evaluate(accel_model_t *model, accel_tensor_t *tokens, const char *file, double *out)
{
    accel_dataloader_t *dl = NULL;
    accel_batch_t *b = NULL;
    double sum = 0.0;
    int64_t n = 0;
    int rc = 1;
    char config[100];
    snprintf(config, sizeof config, "\"block_size\": %d, \"batch_size\": %d", BLOCK, EVAL_BATCH);
    if (failed(accel_model_eval(model), "eval") || failed(token_loader(tokens, file, config, &dl), "validation loader"))
        goto done;
    while (accel_dataloader_next(dl, &b) == ACCEL_OK && b != NULL) {
        accel_tensor_t *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
        double value = 0.0;
        int64_t size = 0;
        int bad = failed(accel_batch_get_inputs(b, &x), "inputs") || failed(accel_batch_get_labels(b, &y), "labels") ||
                  failed(accel_batch_get_size(b, &size), "size") ||
                  failed(accel_model_forward_no_grad(model, x, &logits), "forward") ||
                  failed(accel_loss_compute("causal_lm", logits, y, &loss), "loss") ||
                  failed(accel_tensor_get_item(loss, &value), "loss value");
        sum += value * (double)size;
        n += size;
        accel_tensor_free(x);
        accel_tensor_free(y);
        accel_tensor_free(logits);
        accel_tensor_free(loss);
        accel_batch_free(b);
        if (bad)
            goto done;
    }
    *out = sum / (double)(n > 0 ? n : 1);
    rc = failed(accel_model_train(model), "train");
done:
    accel_dataloader_free(dl);
    return rc;
}

/* Prints `prompt` continued by the model (one generated row), characters mapped back through `chars`. */
static int sample(accel_accelerator_t *acc, accel_model_t *model, const unsigned char *chars,
                  const int64_t *index_of, const char *prompt, const char *options, const char *title)
{
    int64_t ids[BLOCK], len = (int64_t)strlen(prompt), out[BLOCK], i, n = 0;
    char text[BLOCK + 1], line[BLOCK + 100];
    accel_tensor_t *p = NULL, *o = NULL;
    for (i = 0; i < len; ++i) ids[i] = index_of[(unsigned char)prompt[i]];
    /* A sharded model (accel launch --use_fsdp, ZeRO-3) generates from whole parameters, gathered on every
       process (every process samples); any other model answers FAILED_PRECONDITION and generates as it is. */
    const accel_status_t summon = accel_accelerator_summon_full_params_begin(acc, model);
    if (summon != ACCEL_OK && summon != ACCEL_ERR_FAILED_PRECONDITION) return failed(summon, "summon_full_params");
    int bad = failed(accel_tensor_create(ids, (size_t)len * sizeof(int64_t), ACCEL_DTYPE_INT64, &len, 1, &p), "prompt") ||
              failed(accel_model_generate(model, p, options, &o), "generate") ||
              failed(accel_tensor_get_numel(o, &n), "generated length") ||
              failed(accel_tensor_copy_to_buffer(o, out, (size_t)n * sizeof(int64_t)), "generated tokens");
    if (summon == ACCEL_OK) bad = failed(accel_accelerator_summon_full_params_end(acc, model), "summon_full_params") || bad;
    if (bad) {
        accel_tensor_free(p);
        accel_tensor_free(o);
        return 1;
    }
    for (i = 0; i < n; ++i) text[i] = (char)chars[out[i]];
    text[n] = '\0';
    snprintf(line, sizeof line, "--- %s ---\n%s", title, text);
    accel_tensor_free(p);
    accel_tensor_free(o);
    return failed(accel_accelerator_print(acc, line), "print");
}

/* --tokens DIR: the characters of DIR/vocab.bin (prepare_tokens.py) and the token files' total length. */
static int read_vocab(const char *dir, unsigned char *chars, int64_t *vocab, size_t *total, char *train, char *val)
{
    char path[4200];
    struct stat st;
    FILE *f;
    snprintf(path, 4200, "%s/vocab.bin", dir);
    snprintf(train, 4200, "%s/train.bin", dir);
    snprintf(val, 4200, "%s/val.bin", dir);
    if ((f = fopen(path, "rb")) == NULL) {
        fprintf(stderr, "train_gpt: cannot read %s (write it with prepare_tokens.py)\n", path);
        return 1;
    }
    *vocab = (int64_t)fread(chars, 1, 256, f);
    fclose(f);
    *total = 0;
    if (stat(train, &st) == 0) *total += (size_t)st.st_size;
    if (stat(val, &st) == 0) *total += (size_t)st.st_size;
    return *vocab == 0;
}

/* The step a state folder was saved at, from its name "step_<N>" (as Accelerate's examples do). */
static int step_of(const char *dir, int64_t *out)
{
    const char *base = strrchr(dir, '/');
    long long n = -1;
    char tail = 0;
    base = base != NULL && base[1] != '\0' ? base + 1 : dir;
    if (sscanf(base, "step_%lld%c", &n, &tail) != 1 || n < 0) {
        fprintf(stderr, "train_gpt: --resume expects a folder named step_<N> written by --save, got %s\n", dir);
        return 1;
    }
    *out = n;
    return 0;
}

int main(int argc, char **argv)
{
    int64_t steps = 600, eval_every = 100, save_every = 0, stop_at = 0;
    double max_val_loss = 2.35; /* measured 2.221 (600 steps, 2026-11-23) */
    const char *config = NULL, *save_dir = NULL, *resume_dir = NULL, *text_dir = "/usr/share/common-licenses";
    unsigned char *text = NULL, chars[256];
    int64_t index_of[256], vocab = 0, n_text = 0, n_train, *stream = NULL, i;
    size_t text_len = 0;
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *sched = NULL;
    accel_dataloader_t *train = NULL;
    accel_tensor_t *train_tokens = NULL, *val_tokens = NULL;
    accel_batch_t *b = NULL;
    double val_loss = -1.0, loss = 0.0, loss_sum = 0.0;
    int64_t loss_count = 0;
    int64_t step = 0;
    bool main_process = false;
    char json[4600], line[300], state_dir[4200], train_file[4200], val_file[4200];
    const char *token_dir = NULL;
    int rc = 1;
    clock_t started;

    for (int a = 1; a < argc; ++a) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (v != NULL && strcmp(argv[a], "--steps") == 0) steps = atoll(v);
        else if (v != NULL && strcmp(argv[a], "--eval-every") == 0) eval_every = atoll(v);
        else if (v != NULL && strcmp(argv[a], "--max-val-loss") == 0) max_val_loss = atof(v);
        else if (v != NULL && strcmp(argv[a], "--save") == 0) save_dir = v;
        else if (v != NULL && strcmp(argv[a], "--save-every") == 0) save_every = atoll(v);
        else if (v != NULL && strcmp(argv[a], "--stop-at") == 0) stop_at = atoll(v);
        else if (v != NULL && strcmp(argv[a], "--resume") == 0) resume_dir = v;
        else if (v != NULL && strcmp(argv[a], "--text-dir") == 0) text_dir = v;
        else if (v != NULL && strcmp(argv[a], "--tokens") == 0) token_dir = v;
        else if (v != NULL && strcmp(argv[a], "--config") == 0) config = v;
        else {
            fprintf(stderr, "train_gpt: unknown or incomplete argument %s (see the comment at the top of train_gpt.c)\n",
                    argv[a]);
            return 2;
        }
        ++a;
    }
    if (steps < 1 || eval_every < 1 || save_every < 0 || stop_at < 0) {
        fprintf(stderr, "train_gpt: --steps and --eval-every must be >= 1, --save-every and --stop-at >= 0\n");
        return 2;
    }

    if (token_dir != NULL) {
        if (read_vocab(token_dir, chars, &vocab, &text_len, train_file, val_file))
            goto done;
        for (i = 0; i < 256; ++i) index_of[i] = -1;
        for (i = 0; i < vocab; ++i) index_of[chars[i]] = i;
    } else {
    /* Characters: the distinct bytes of the text, in byte order. */
    if ((text = read_texts(text_dir, &text_len)) == NULL || text_len < 20 * (BLOCK + 1)) {
        fprintf(stderr, "train_gpt: not enough text in %s\n", text_dir);
        goto done;
    }
    for (i = 0; i < 256; ++i) index_of[i] = -1;
    for (size_t k = 0; k < text_len; ++k) index_of[text[k]] = 0;
    for (i = 0; i < 256; ++i)
        if (index_of[i] == 0) {
            chars[vocab] = (unsigned char)i;
            index_of[i] = vocab++;
        }
    n_text = (int64_t)text_len;
    stream = malloc((size_t)n_text * sizeof(int64_t));
    if (stream == NULL)
        goto done;
    for (i = 0; i < n_text; ++i) stream[i] = index_of[text[i]];
    n_train = n_text - n_text / 10;
    {
        int64_t n_val = n_text - n_train;
        if (failed(accel_tensor_create(stream, (size_t)n_train * sizeof(int64_t), ACCEL_DTYPE_INT64, &n_train, 1,
                                       &train_tokens), "train tokens") ||
            failed(accel_tensor_create(stream + n_train, (size_t)n_val * sizeof(int64_t), ACCEL_DTYPE_INT64, &n_val, 1,
                                       &val_tokens), "validation tokens"))
            goto done;
    }
    }

    if (failed(accel_random_set_seed(1337, false, false), "seed") ||
        failed(accel_accelerator_create(config, &acc), "create accelerator") ||
        failed(accel_accelerator_is_main_process(acc, &main_process), "query"))
        goto done;
    snprintf(json, sizeof json,
             "{\"type\": \"gpt\", \"vocab_size\": %lld, \"n_positions\": %d, \"n_embd\": 128, \"n_layer\": 4,"
             " \"n_head\": 4, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}",
             (long long)vocab, BLOCK);
    if (failed(accel_model_create_from_json(json, &model), "create model") ||
        failed(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.003, \"weight_decay\": 0.01}", &opt),
               "create optimizer"))
        goto done;
    snprintf(json, sizeof json, "{\"type\": \"cosine\", \"num_warmup_steps\": %lld, \"num_training_steps\": %lld}",
             (long long)(steps / 20), (long long)steps);
    if (failed(accel_scheduler_create(opt, json, &sched), "create scheduler"))
        goto done;
    snprintf(json, sizeof json, "\"block_size\": %d, \"stride\": %d, \"batch_size\": %d, \"shuffle\": true,"
             " \"seed\": 7, \"drop_last\": true", BLOCK, BLOCK / 2, BATCH);
    if (failed(token_loader(train_tokens, token_dir ? train_file : NULL, json, &train), "train loader") ||
        failed(accel_accelerator_prepare(acc, model, opt, train, sched), "prepare"))
        goto done;
    if (resume_dir != NULL && (step_of(resume_dir, &step) || failed(accel_accelerator_load_state(acc, resume_dir), "load_state")))
        goto done;
    snprintf(line, sizeof line, "data: %zu characters (vocabulary %lld), %lld training steps%s%lld",
             text_len, (long long)vocab, (long long)steps, resume_dir ? ", resumed at step " : ", from step ",
             (long long)step);
    if (failed(accel_accelerator_print(acc, line), "print"))
        goto done;

    /* Trackers of the config's "log_with" get every step's loss and learning rate (nothing without log_with). */
    snprintf(json, sizeof json, "{\"steps\": %lld, \"block_size\": %d, \"batch_size\": %d}", (long long)steps, BLOCK, BATCH);
    int32_t processes = 1;
    if (failed(accel_accelerator_init_trackers(acc, "train_gpt", json, NULL), "init_trackers") ||
        failed(accel_accelerator_get_num_processes(acc, &processes), "num_processes"))
        goto done;
    const int show_bar = progress_enabled(acc);
    double interval_start = progress_now();
    started = clock();
    while (step < (stop_at > 0 && stop_at < steps ? stop_at : steps)) {
        if (failed(accel_dataloader_next(train, &b), "next batch"))
            goto done;
        if (b == NULL)
            continue; /* end of a pass: the next call starts the next one */
        if (failed(accel_accelerator_train_step(acc, model, opt, sched, b, "causal_lm", &loss), "train step")) {
            accel_batch_free(b);
            goto done;
        }
        accel_batch_free(b);
        ++step;
        loss_sum += loss;
        ++loss_count;
        {
            double lr = 0.0;
            char values[96];
            if (failed(accel_scheduler_get_last_lr(sched, &lr), "lr"))
                goto done;
            snprintf(values, sizeof values, "{\"loss\": %.9g, \"lr\": %.9g}", loss, lr);
            if (failed(accel_accelerator_log(acc, values, step), "log"))
                goto done;
        }
        if (show_bar) { /* up to the next evaluation line */
            char label[48];
            const int64_t in_interval = (step - 1) % eval_every + 1;
            snprintf(label, sizeof label, "step %lld/%lld", (long long)step, (long long)steps);
            progress_draw(label, in_interval, eval_every,
                          (double)(in_interval * BATCH * BLOCK * processes) / (progress_now() - interval_start),
                          "tokens", loss_sum / (double)loss_count);
        }
        if (step % eval_every == 0 || step == steps) {
            if (show_bar)
                progress_clear();
            interval_start = progress_now();
            if (evaluate(model, val_tokens, token_dir ? val_file : NULL, &val_loss))
                goto done;
            snprintf(line, sizeof line, "step %5lld  train loss %.4f  val loss %.4f  (%.0f s CPU)", (long long)step,
                     loss_sum / (double)loss_count, val_loss, (double)(clock() - started) / CLOCKS_PER_SEC);
            if (failed(accel_accelerator_print(acc, line), "print"))
                goto done;
            loss_sum = 0.0;
            loss_count = 0;
        }
        if (save_dir != NULL && ((save_every > 0 && step % save_every == 0) || step == steps || step == stop_at)) {
            snprintf(state_dir, sizeof state_dir, "%s/step_%lld", save_dir, (long long)step);
            if (failed(accel_accelerator_save_state(acc, state_dir), "save_state"))
                goto done;
        }
    }
    if (show_bar && step % eval_every != 0)
        progress_clear();
    if (failed(accel_accelerator_end_training(acc), "end_training"))
        goto done;
    if (step < steps) {
        if (save_dir != NULL)
            snprintf(line, sizeof line, "stopped at step %lld of %lld; continue with --resume %s", (long long)step,
                     (long long)steps, state_dir);
        else
            snprintf(line, sizeof line, "stopped at step %lld of %lld", (long long)step, (long long)steps);
        rc = failed(accel_accelerator_print(acc, line), "print");
        goto done;
    }

    if (val_loss < 0.0 && evaluate(model, val_tokens, token_dir ? val_file : NULL, &val_loss)) /* resumed at the end: nothing trained */
        goto done;
    if (sample(acc, model, chars, index_of, "This program is free software", "{\"max_new_tokens\": 90}",
               "greedy") ||
        sample(acc, model, chars, index_of, "Permission ",
               "{\"max_new_tokens\": 110, \"do_sample\": true, \"top_k\": 10, \"temperature\": 0.8, \"seed\": 42}",
               "top-k 10, temperature 0.8, seed 42"))
        goto done;
    snprintf(line, sizeof line, "final loss %.8f (validation; required <= %.4f)", val_loss, max_val_loss);
    if (failed(accel_accelerator_print(acc, line), "print"))
        goto done;
    rc = val_loss <= max_val_loss ? 0 : 1;

done:
    accel_dataloader_free(train);
    accel_scheduler_free(sched);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(train_tokens);
    accel_tensor_free(val_tokens);
    accel_accelerator_free(acc);
    free(stream);
    free(text);
    return rc;
}
