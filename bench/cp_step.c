/* Context parallelism's cost and saving, through the real path (prepared token loader splitting each sequence,
 * train_step, DDP over dp_cp): peak activation memory of the first training step of a small GPT at T tokens, and
 * tokens per second over the following steps, in one process and under `accel launch -n 2
 * --parallelism_config_cp_size 2`; bench/cp_step.sh runs both strategies and prints the ratios. Each step's loss
 * is printed, so the script also checks that context parallelism trains as one process does; with a folder,
 * the state is saved after the steps, loaded back, and one more step's loss printed (checkpoints under cp).
 * "Activation memory" is the growth of the resident set during the first step over the resident set just
 * before it (SGD: no optimizer state appears in that step).
 * The same measures tensor parallelism with and without sequence parallelism (BENCH_ACCEL_CONFIG below) and
 * selective recomputation (BENCH_MODEL_KEYS). BENCH_MODEL=llama trains a Llama of the same shape (bench/lm_spec.h).
 * `batch` (default 1) is the global batch: above 1 the loader runs with split_batches (unless BENCH_ACCEL_CONFIG says
 * otherwise), so one process, a cp group and DDP ranks all train the same sequences per step and their tokens/s
 * compare the same work. The last line also gives the process's peak resident set (per-rank memory).
 * Usage: [BENCH_MODEL=gpt|llama] bench_cp_step [T] [steps] [folder|-] [batch] */
#include "bench_common.h"
#include "lm_spec.h"

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 2048;
    const int steps = argc > 2 ? atoi(argv[2]) : 4;
    const char *folder = argc > 3 && strcmp(argv[3], "-") != 0 ? argv[3] : NULL;
    const int batch = argc > 4 ? atoi(argv[4]) : 1;
    enum { VOCAB = 4096 };
    if (T < 1 || steps < 1 || batch < 1) {
        fprintf(stderr, "T, steps and batch must be at least 1\n");
        return 2;
    }
    /* BENCH_MODEL_KEYS: more keys of the model spec, e.g. "\"recompute_granularity\": \"selective\"". */
    char spec[640];
    bench_lm_spec(spec, sizeof spec, VOCAB, T, 4, getenv("BENCH_MODEL_KEYS"));
    const int64_t n = (int64_t)T * batch * (steps + 2) + 1;
    /* BENCH_ACCEL_CONFIG: an accelerator config JSON (e.g. tensor parallelism with tp_handler.sequence_parallel).
     * Without it, a batch of several sequences is split over the data shards (DDP's ranks) rather than repeated. */
    const char *config = getenv("BENCH_ACCEL_CONFIG");
    if (config == NULL && batch > 1) config = "{\"split_batches\": true}";
    BenchLm lm = bench_prepare_lm(config, spec, "{\"type\": \"sgd\", \"lr\": 0.05}", T, batch, n, VOCAB);

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
    /* The whole (global) batch's tokens per second (every rank of a cp group works on the same sequences, DDP's
     * ranks on their share of them, in the same step). */
    printf("rank %d world %d activation_bytes %lld peak_before_bytes %lld tokens_per_s %.1f peak_bytes %lld\n", lm.rank,
           lm.world, activation, peak_before, steps > 1 ? (double)T * batch * (steps - 1) / seconds : 0.0, peak_rss_bytes());
    bench_lm_free(&lm);
    return 0;
}
