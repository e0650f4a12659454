/* Tensor parallelism's cost and saving on a small llama (4 layers, hidden 512, 8 query over 4 key/value heads,
 * vocabulary 8192), through the real path (prepare applies the plan, train_step, AdamW): seconds per step
 * (median of the steps after the first) and, after the last step, this rank's parameter and optimizer-state
 * bytes (accel_accelerator_get_memory_stats_json) and peak RSS. Every step's loss is printed, so bench/tp_step.sh
 * also checks that tp trains as one process does. Usage: bench_tp_step [T] [steps] (BENCH_SPEC, BENCH_ACCEL_CONFIG:
 * below) */
#include "bench_common.h"

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 256;
    const int steps = argc > 2 ? atoi(argv[2]) : 6;
    enum { VOCAB = 8192, BATCH = 4 };
    char spec[400];
    snprintf(spec, sizeof spec,
             "{\"type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": 512, \"intermediate_size\": 1376,"
             " \"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
             " \"max_position_embeddings\": %d, \"tie_word_embeddings\": false}",
             VOCAB, T);
    /* BENCH_SPEC: another model (its vocabulary must be VOCAB); BENCH_ACCEL_CONFIG: an accelerator config JSON
     * (bench/tp_mesh.sh: DDP, FSDP, tp, tp x FSDP, sequence parallelism). */
    const char *other = getenv("BENCH_SPEC");
    const int64_t n = (int64_t)T * BATCH * (steps + 1) * 4 + 1; /* enough for up to 4 data-parallel ranks */
    BenchLm lm = bench_prepare_lm(getenv("BENCH_ACCEL_CONFIG"), other ? other : spec,
                                  "{\"type\": \"adamw\", \"lr\": 1e-4}", T, BATCH, n, VOCAB);

    double times[64];
    int timed = 0;
    for (int s = 0; s < steps && s < 64; ++s) {
        accel_batch_t *b = NULL;
        double loss = 0.0;
        CHECK(accel_dataloader_next(lm.dl, &b));
        if (b == NULL) {
            fprintf(stderr, "bench_tp_step: the loader ran out of batches\n");
            return 1;
        }
        const double t0 = now();
        CHECK(accel_accelerator_train_step(lm.acc, lm.model, lm.opt, NULL, b, "causal_lm", &loss));
        if (s > 0) times[timed++] = now() - t0; /* the first step allocates AdamW's state */
        accel_batch_free(b);
        printf("rank %d step %d loss %.6f\n", lm.rank, s, loss);
    }
    qsort(times, (size_t)timed, sizeof times[0], cmp);
    char *memory = NULL;
    CHECK(accel_accelerator_get_memory_stats_json(lm.acc, &memory));
    printf("rank %d seconds_per_step %.4f peak_rss_mib %.1f memory %s\n", lm.rank, timed ? times[timed / 2] : 0.0,
           status_mib("VmHWM:"), memory);
    accel_string_free(memory);
    bench_lm_free(&lm);
    return 0;
}
