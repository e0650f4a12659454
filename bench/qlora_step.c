/*
 * QLoRA against LoRA and full fine-tuning of one small llama (a program, not a test; bench/qlora_step.sh runs each
 * mode in its own process, so that each peak RSS is its own, and prints the ratios to full fine-tuning).
 *
 *   qlora_step full|lora|qlora|qlora_bf16 STEPS WARMUP
 *
 * The llama: 4 layers, hidden 512, intermediate 1376, 8 heads, vocabulary 8000 (untied head), sequences of 64
 * tokens, batch 4, loss causal_lm, AdamW, one process on the CPU. "full": every parameter trains (float32);
 * "lora": adapters r 8 (lora_alpha 16) on every linear layer over the frozen float32 base; "qlora": the same
 * adapters over an NF4 base with double quantization (accel_model_quantize before prepare; the head and the
 * embeddings stay float32, as Accelerate leaves them), computing in float32; "qlora_bf16" computing in bfloat16.
 * Each step is forward, loss, backward, optimizer step, zero_grad. One line:
 *   qlora_step MODE median_step_ms T memory {accel_accelerator_get_memory_stats_json after the last step}
 */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: qlora_step full|lora|qlora|qlora_bf16 STEPS WARMUP\n");
        return 2;
    }
    const char *mode = argv[1];
    const int steps = atoi(argv[2]), warmup = atoi(argv[3]);
    const int quantized = strncmp(mode, "qlora", 5) == 0, adapters = quantized || strcmp(mode, "lora") == 0;
    enum { SEQ = 64, BATCH = 4, VOCAB = 8000 };
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": 512, \"intermediate_size\": 1376, "
             "\"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"max_position_embeddings\": %d, "
             "\"tie_word_embeddings\": false%s}",
             VOCAB, SEQ,
             adapters ? ", \"lora\": {\"r\": 8, \"lora_alpha\": 16, \"target_modules\": \"all-linear\"}" : "");
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(NULL, &acc));
    CHECK(accel_model_create_from_json(spec, &model));
    if (quantized)
        CHECK(accel_model_quantize(model, strcmp(mode, "qlora_bf16") == 0
                                              ? "{\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", "
                                                "\"bnb_4bit_use_double_quant\": true, \"bnb_4bit_compute_dtype\": \"bf16\"}"
                                              : "{\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", "
                                                "\"bnb_4bit_use_double_quant\": true, \"bnb_4bit_compute_dtype\": \"fp32\"}"));
    CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.0001}", &opt));
    CHECK(accel_accelerator_prepare(acc, model, opt, NULL, NULL));
    static int64_t tokens[BATCH * SEQ];
    for (int i = 0; i < BATCH * SEQ; ++i) tokens[i] = (i * 7919) % VOCAB;
    const int64_t shape[2] = {BATCH, SEQ};
    accel_tensor_t *in = NULL;
    CHECK(accel_tensor_create(tokens, sizeof tokens, ACCEL_DTYPE_INT64, shape, 2, &in));
    double *times = malloc((size_t)steps * sizeof(double));
    char *memory = NULL;
    for (int i = 0; i < steps + warmup; ++i) {
        accel_tensor_t *out = NULL, *loss = NULL;
        const double t0 = now();
        CHECK(accel_model_forward(model, in, &out));
        CHECK(accel_loss_compute("causal_lm", out, in, &loss));
        CHECK(accel_accelerator_backward(acc, loss));
        CHECK(accel_optimizer_step(opt));
        if (i == steps + warmup - 1) CHECK(accel_accelerator_get_memory_stats_json(acc, &memory));
        CHECK(accel_optimizer_zero_grad(opt));
        if (i >= warmup) times[i - warmup] = (now() - t0) * 1e3;
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    qsort(times, (size_t)steps, sizeof(double), cmp);
    printf("qlora_step %s median_step_ms %.3f memory %s\n", mode, times[steps / 2], memory);
    accel_string_free(memory);
    free(times);
    accel_tensor_free(in);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
