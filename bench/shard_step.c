/*
 * Sharded training benchmark (a program, not a test; bench/shard_bench.sh runs it for every strategy and
 * prints the ratios to DDP measured in the same run; see BENCHMARKS.md, "Sharded training").
 *
 *   shard_step MODEL STEPS WARMUP '<accelerator config JSON>'
 *
 * MODEL "mlp": the medium MLP (widths 1024,1024,1024,10, batch 64 per process); "transformer": 8
 * transformer_encoder_layer blocks (d_model 256, 4 heads, feed-forward 1024, sequences of 16, batch 16
 * per process), flattened into a linear classifier; "gpt": a GPT-2 decoder of 8 blocks (n_embd 256, 4 heads,
 * vocabulary 2048, sequences of 32 tokens, batch 8 per process, loss causal_lm, tied head); "gpt_lora" that GPT with
 * LoRA adapters (r 8, lora_alpha 16) on c_attn (PEFT's default for gpt2), "gpt_lora_all" on every linear layer
 * (bench/lora_memory.sh). AdamW. Each step is forward, loss, backward, optimizer
 * step, zero_grad, timed on every rank. Every rank prints one line:
 *   shard_step rank R median_step_ms T memory {accel_accelerator_get_memory_stats_json after the last step,
 *   before zero_grad}
 */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: shard_step mlp|transformer|gpt|gpt_lora|gpt_lora_all STEPS WARMUP CONFIG\n");
        return 2;
    }
    const int transformer = strcmp(argv[1], "transformer") == 0, gpt = strncmp(argv[1], "gpt", 3) == 0;
    const char *lora = strcmp(argv[1], "gpt_lora") == 0       ? ", \"lora\": {\"r\": 8, \"lora_alpha\": 16}"
                       : strcmp(argv[1], "gpt_lora_all") == 0 ? ", \"lora\": {\"r\": 8, \"lora_alpha\": 16, "
                                                                "\"target_modules\": \"all-linear\"}"
                                                              : "";
    const int steps = atoi(argv[2]), warmup = atoi(argv[3]);
    const char *config = argv[4];
    enum { SEQ = 16, D = 256, CLASSES = 10, GPT_SEQ = 32, VOCAB = 2048 };
    const int batch = gpt ? 8 : transformer ? 16 : 64;
    const int64_t features = gpt ? GPT_SEQ : transformer ? (int64_t)SEQ * D : 1024;

    char spec[4096];
    if (gpt) {
        snprintf(spec, sizeof spec,
                 "{\"type\": \"gpt\", \"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": %d, \"n_layer\": 8, "
                 "\"n_head\": 4, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0%s}",
                 VOCAB, GPT_SEQ, D, lora);
    } else if (transformer) {
        int n = snprintf(spec, sizeof spec, "{\"type\": \"sequential\", \"layers\": [");
        for (int i = 0; i < 8; ++i)
            n += snprintf(spec + n, sizeof spec - (size_t)n,
                          "{\"type\": \"transformer_encoder_layer\", \"d_model\": %d, \"nhead\": 4, "
                          "\"dim_feedforward\": 1024, \"dropout\": 0.0, \"batch_first\": true}, ",
                          D);
        snprintf(spec + n, sizeof spec - (size_t)n,
                 "{\"type\": \"flatten\"}, {\"type\": \"linear\", \"in_features\": %d, \"out_features\": %d}]}", SEQ * D,
                 CLASSES);
    } else {
        snprintf(spec, sizeof spec, "{\"type\": \"mlp\", \"widths\": [1024, 1024, 1024, %d]}", CLASSES);
    }

    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    int32_t rank = 0;
    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(config, &acc));
    CHECK(accel_accelerator_get_process_index(acc, &rank));
    CHECK(accel_model_create_from_json(spec, &model));
    CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.0001}", &opt));
    CHECK(accel_accelerator_prepare(acc, model, opt, NULL, NULL));

    float *x = malloc((size_t)batch * (size_t)features * sizeof(float));
    int64_t y[64], tokens[8 * GPT_SEQ];
    for (int64_t i = 0; i < batch * features; ++i) x[i] = (float)(((i + rank) * 7919 % 1000) / 1000.0 - 0.5);
    for (int i = 0; i < batch; ++i) y[i] = i % CLASSES;
    for (int i = 0; i < 8 * GPT_SEQ; ++i) tokens[i] = (i * 7919 + rank * 13) % VOCAB;
    int64_t xs3[3] = {batch, SEQ, D}, xs2[2] = {batch, 1024}, ys[1] = {batch}, ts[2] = {batch, GPT_SEQ};
    accel_tensor_t *in = NULL, *lab = NULL;
    if (gpt) { /* causal_lm: the labels are the tokens (shifted inside the loss) */
        CHECK(accel_tensor_create(tokens, sizeof tokens, ACCEL_DTYPE_INT64, ts, 2, &in));
        CHECK(accel_tensor_create(tokens, sizeof tokens, ACCEL_DTYPE_INT64, ts, 2, &lab));
    } else {
        CHECK(accel_tensor_create(x, (size_t)batch * (size_t)features * sizeof(float), ACCEL_DTYPE_FLOAT32,
                                  transformer ? xs3 : xs2, transformer ? 3 : 2, &in));
        CHECK(accel_tensor_create(y, (size_t)batch * sizeof(int64_t), ACCEL_DTYPE_INT64, ys, 1, &lab));
    }

    double *times = malloc((size_t)steps * sizeof(double));
    char *memory = NULL;
    for (int i = 0; i < steps + warmup; ++i) {
        accel_tensor_t *out = NULL, *loss = NULL;
        double t0 = now();
        CHECK(accel_model_forward(model, in, &out));
        CHECK(accel_loss_compute(gpt ? "causal_lm" : "cross_entropy", out, lab, &loss));
        CHECK(accel_accelerator_backward(acc, loss));
        CHECK(accel_optimizer_step(opt));
        if (i == steps + warmup - 1) CHECK(accel_accelerator_get_memory_stats_json(acc, &memory));
        CHECK(accel_optimizer_zero_grad(opt));
        double t1 = now();
        if (i >= warmup) times[i - warmup] = (t1 - t0) * 1e3;
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    qsort(times, (size_t)steps, sizeof(double), cmp);
    printf("shard_step rank %d median_step_ms %.3f memory %s\n", rank, times[steps / 2], memory);
    fflush(stdout);
    accel_string_free(memory);
    free(times);
    free(x);
    accel_tensor_free(in);
    accel_tensor_free(lab);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
