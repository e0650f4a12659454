/*
 * Fine-tune a Llama model from a Hugging Face folder with LoRA adapters through accel's C API, save the adapter
 * (PEFT's adapter_model.safetensors + adapter_config.json) and generate.
 *
 *   ./finetune_llama MODEL_DIR ADAPTER_DIR [--steps N] [--config '<accelerator config JSON>']
 *
 * MODEL_DIR is what transformers' save_pretrained writes (config.json + model.safetensors or shards with
 * model.safetensors.index.json); the tests make a small one with tests/python/llama_reference.py (no download):
 *   python3 tests/python/llama_reference.py write tiny-llama '{"vocab_size": 32, "hidden_size": 64,
 *       "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}' 0 40000
 * The base weights stay frozen; r-8 adapters on q_proj and v_proj learn a token sequence made here (each token the
 * previous plus a step that changes every 7 tokens), so the loss falls. The main process prints the loss every
 * 10 steps and the greedy continuation of a prompt before and after; the program exits non-zero unless the last
 * loss is below half the first. Works unchanged under `accel launch -n 2 ./finetune_llama ...`.
 */
#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(accel_status_t st, const char *what)
{
    if (st == ACCEL_OK) return 0;
    fprintf(stderr, "finetune_llama: %s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
    return 1;
}

/* The vocabulary size from config.json (the tokens made below must fit it). */
static int64_t vocab_size_of(const char *dir)
{
    char path[1024], text[8192];
    FILE *f;
    size_t n;
    const char *v;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((f = fopen(path, "rb")) == NULL) return 0;
    n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    v = strstr(text, "\"vocab_size\"");
    return v ? strtoll(strchr(v, ':') + 1, NULL, 10) : 0;
}

/* Greedy continuation of a 6-token prompt of the training sequence, printed on the main process. */
static int show_generation(accel_accelerator_t *acc, accel_model_t *model, const int64_t *prompt, const char *label)
{
    int64_t shape[1] = {6}, out[16];
    accel_tensor_t *ids = NULL, *gen = NULL;
    char line[256];
    int len, i;
    if (failed(accel_tensor_create(prompt, sizeof(int64_t) * 6, ACCEL_DTYPE_INT64, shape, 1, &ids), "prompt") ||
        failed(accel_model_generate(model, ids, "{\"max_new_tokens\": 10}", &gen), "generate") ||
        failed(accel_tensor_copy_to_buffer(gen, out, sizeof out), "generated tokens")) {
        accel_tensor_free(ids);
        accel_tensor_free(gen);
        return 1;
    }
    len = snprintf(line, sizeof line, "%s:", label);
    for (i = 0; i < 16 && len < (int)sizeof line - 8; ++i) len += snprintf(line + len, sizeof line - (size_t)len, " %lld", (long long)out[i]);
    accel_tensor_free(ids);
    accel_tensor_free(gen);
    return failed(accel_accelerator_print(acc, line), "print");
}

int main(int argc, char **argv)
{
    const char *model_dir, *adapter_dir, *config = NULL;
    long steps = 60, step = 0;
    int64_t vocab, n = 4096, i;
    int64_t *stream;
    double loss = 0, first = -1;
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *loader = NULL;
    accel_tensor_t *tokens = NULL;
    accel_batch_t *batch = NULL;
    char line[160];
    int k, rc = 1;

    if (argc < 3) {
        fprintf(stderr, "usage: finetune_llama MODEL_DIR ADAPTER_DIR [--steps N] [--config JSON]\n");
        return 2;
    }
    model_dir = argv[1];
    adapter_dir = argv[2];
    for (k = 3; k + 1 < argc; k += 2) {
        if (strcmp(argv[k], "--steps") == 0) steps = strtol(argv[k + 1], NULL, 10);
        else if (strcmp(argv[k], "--config") == 0) config = argv[k + 1];
    }
    vocab = vocab_size_of(model_dir);
    if (vocab < 8) {
        fprintf(stderr, "finetune_llama: %s/config.json: no vocab_size of at least 8\n", model_dir);
        return 1;
    }
    stream = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
    for (i = 0; i < n; ++i) stream[i] = i == 0 ? 0 : (stream[i - 1] + 1 + (i / 7) % 3) % vocab;

    if (failed(accel_random_set_seed(42, false, false), "set_seed") ||
        failed(accel_accelerator_create(config, &acc), "accelerator")) goto done;
    /* The base model with adapters: from_pretrained hands "lora" into the model spec (PEFT's LoraConfig keys). */
    if (failed(accel_model_from_pretrained(model_dir, "{\"lora\": {\"r\": 8, \"lora_alpha\": 16, \"lora_dropout\": 0.0,"
                                                      " \"target_modules\": [\"q_proj\", \"v_proj\"]}}", &model),
               "from_pretrained") ||
        show_generation(acc, model, stream + 100, "before"))
        goto done;
    if (failed(accel_tensor_create(stream, sizeof(int64_t) * (size_t)n, ACCEL_DTYPE_INT64, &n, 1, &tokens), "tokens") ||
        failed(accel_dataloader_create_from_tokens(tokens, "{\"block_size\": 32, \"batch_size\": 8, \"shuffle\": true}",
                                                   &loader), "dataloader") ||
        /* Only the adapters train: the frozen base weights get no optimizer state. */
        failed(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt), "optimizer") ||
        failed(accel_accelerator_prepare(acc, model, opt, loader, NULL), "prepare"))
        goto done;
    for (int64_t epoch = 0; step < steps; ++epoch) {
        if (failed(accel_dataloader_set_epoch(loader, epoch), "set_epoch")) goto done;
        while (step < steps) {
            if (failed(accel_dataloader_next(loader, &batch), "next batch")) goto done;
            if (batch == NULL) break;
            if (failed(accel_accelerator_train_step(acc, model, opt, NULL, batch, "causal_lm", &loss), "train_step"))
                goto done;
            accel_batch_free(batch);
            batch = NULL;
            if (first < 0) first = loss;
            if (++step % 10 == 0) {
                snprintf(line, sizeof line, "step %ld: loss %.4f", step, loss);
                if (failed(accel_accelerator_print(acc, line), "print")) goto done;
            }
        }
    }
    /* PEFT's adapter folder (every process calls it; the main process writes). */
    if (failed(accel_model_save_pretrained(model, adapter_dir, "{\"adapter_only\": true}"), "save_pretrained") ||
        failed(accel_model_eval(model), "eval") ||
        show_generation(acc, model, stream + 100, "after"))
        goto done;
    snprintf(line, sizeof line, "first loss %.4f, last loss %.4f; adapter saved in %s", first, loss, adapter_dir);
    if (failed(accel_accelerator_print(acc, line), "print")) goto done;
    rc = loss < 0.5 * first ? 0 : 1;
    if (rc != 0) fprintf(stderr, "finetune_llama: the loss did not halve (%.4f -> %.4f)\n", first, loss);
done:
    accel_batch_free(batch);
    accel_dataloader_free(loader);
    accel_optimizer_free(opt);
    accel_tensor_free(tokens);
    accel_model_free(model);
    accel_accelerator_free(acc);
    free(stream);
    return rc;
}
