/* The model spec of the parallelism benchmarks (bench_cp_step, bench_pp_step): BENCH_MODEL=gpt (the default) or
 * llama, both with hidden size 256, 8 heads and `layers` blocks, so that the two models' figures compare the same
 * shapes. The llama is a small Llama built in memory as bench/llama_train.cpp's is (grouped-query attention with 4
 * key/value heads, SwiGLU 688, rotary positions, tied head like the GPT's), through the same C API calls. `extra`:
 * more keys of the spec (NULL for none), e.g. "\"recompute_granularity\": \"selective\"". */
#ifndef ACCEL_BENCH_LM_SPEC_H
#define ACCEL_BENCH_LM_SPEC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "gpt" or "llama" from BENCH_MODEL; anything else stops the benchmark (a typo must not measure the GPT). */
static inline const char *bench_model_type(void)
{
    const char *m = getenv("BENCH_MODEL");
    if (m == NULL || *m == '\0' || strcmp(m, "gpt") == 0) return "gpt";
    if (strcmp(m, "llama") == 0) return "llama";
    fprintf(stderr, "BENCH_MODEL: expected gpt or llama, got \"%s\"\n", m);
    exit(2);
}

static inline void bench_lm_spec(char *out, size_t size, int vocab, int positions, int layers, const char *extra)
{
    const char *sep = extra != NULL ? ", " : "", *more = extra != NULL ? extra : "";
    int n;
    if (strcmp(bench_model_type(), "llama") == 0)
        n = snprintf(out, size,
                     "{\"type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": 256, \"intermediate_size\": 688,"
                     " \"num_hidden_layers\": %d, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
                     " \"max_position_embeddings\": %d, \"tie_word_embeddings\": true%s%s}",
                     vocab, layers, positions, sep, more);
    else
        n = snprintf(out, size,
                     "{\"type\": \"gpt\", \"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": 256, \"n_layer\": %d,"
                     " \"n_head\": 8, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0%s%s}",
                     vocab, positions, layers, sep, more);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "the model spec does not fit in %zu bytes\n", size);
        exit(2);
    }
}

#endif
