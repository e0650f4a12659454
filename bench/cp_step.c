/* Context parallelism's cost and saving, through the real path (prepared token loader splitting each sequence,
 * train_step, DDP over dp_cp): peak activation memory of the first training step of a small GPT at T tokens, and
 * tokens per second over the following steps, in one process and under `accel launch -n 2
 * --parallelism_config_cp_size 2`; bench/cp_step.sh runs both strategies and prints the ratios. Each step's loss
 * is printed, so the script also checks that context parallelism trains as one process does; with a folder,
 * the state is saved after the steps, loaded back, and one more step's loss printed (checkpoints under cp).
 * "Activation memory" is the growth of the resident set during the first step over the resident set just
 * before it (SGD: no optimizer state appears in that step).
 * The same measures tensor parallelism with and without sequence parallelism (BENCH_ACCEL_CONFIG below) and
 * selective recomputation (BENCH_MODEL_KEYS).
 * Usage: bench_cp_step [T] [steps] [folder] */
#include "bench_common.h"

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 2048;
    const int steps = argc > 2 ? atoi(argv[2]) : 4;
    const char *folder = argc > 3 ? argv[3] : NULL;
    enum { VOCAB = 4096 };
    /* BENCH_MODEL_KEYS: more keys of the model spec, e.g. "\"recompute_granularity\": \"selective\"". */
    const char *keys = getenv("BENCH_MODEL_KEYS");
    char spec[512];
    snprintf(spec, sizeof spec,
             "{\"type\": \"gpt\", \"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": 256, \"n_layer\": 4, \"n_head\": 8,"
             " \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0%s%s}",
             VOCAB, T, keys != NULL ? ", " : "", keys != NULL ? keys : "");
    const int64_t n = (int64_t)T * (steps + 2) + 1;
    /* BENCH_ACCEL_CONFIG: an accelerator config JSON (e.g. tensor parallelism with tp_handler.sequence_parallel). */
    BenchLm lm = bench_prepare_lm(getenv("BENCH_ACCEL_CONFIG"), spec, "{\"type\": \"sgd\", \"lr\": 0.05}", T, 1, n, VOCAB);

    const long long before = rss_bytes(), peak_before = peak_rss_bytes();
    double loss = bench_lm_step(&lm);
    const long long activation = peak_rss_bytes() - before;
    printf("rank %d step 0 loss %.6f\n", lm.rank, loss);
    const double t0 = now();
    for (int s = 1; s < steps; ++s) {
        loss = bench_lm_step(&lm);
        printf("rank %d step %d loss %.6f\n", lm.rank, s, loss);
    }
    const double seconds = now() - t0;
    if (folder != NULL) {
        CHECK(accel_accelerator_save_state(lm.acc, folder));
        CHECK(accel_accelerator_load_state(lm.acc, folder));
        printf("rank %d resumed loss %.6f\n", lm.rank, bench_lm_step(&lm));
    }
    /* The whole batch's tokens per second (every lm.rank of a cp group works on the same sequences). */
    printf("rank %d world %d activation_bytes %lld peak_before_bytes %lld tokens_per_s %.1f\n", lm.rank, lm.world, activation,
           peak_before, steps > 1 ? (double)T * (steps - 1) / seconds : 0.0);
    bench_lm_free(&lm);
    return 0;
}
