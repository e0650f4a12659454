/* Pipeline parallelism's cost and saving through the real path (prepared token loader, train_step): the growth
 * of the resident set during the first training step of a GPT (its activations; SGD adds no state) and the
 * seconds per step over the following steps, in one process and as pipeline stages under `accel launch`
 * (bench/pp_step.sh runs GPipe, 1F1B and interleaved 1F1B and prints the ratios and the bubble), and each
 * stage's bubble as the pipeline measures it (accel_accelerator_get_parallel_ranks_json's "pipeline": the
 * share of the schedule's wall time outside the stage's computations, averaged over the timed steps). Each
 * step's loss is printed, so the script also checks that the pipeline trains as one process does. BENCH_MODEL=llama
 * trains a Llama of the same shape (bench/lm_spec.h); the script's DDP baseline passes '{"split_batches": true}'
 * so that `batch` stays the global batch. The last line gives tokens/s (the global batch's) and the peak resident set.
 * Usage: [BENCH_MODEL=gpt|llama] [PP_BENCH_VOCAB=V] [PP_BENCH_LAYERS=L] bench_pp_step [T] [batch] [steps]
 *        ['<accelerator config JSON>'] */
#include "bench_common.h"
#include "lm_spec.h"

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 256;
    const int batch = argc > 2 ? atoi(argv[2]) : 16;
    const int steps = argc > 3 ? atoi(argv[3]) : 4;
    const char *config = argc > 4 ? argv[4] : NULL;
    /* PP_BENCH_VOCAB / PP_BENCH_LAYERS reshape the model: a small vocabulary and more blocks make the stages'
     * work nearly equal (the last stage's head and loss grow with the vocabulary), which the bubble's theory
     * assumes. */
    const char *vocab_env = getenv("PP_BENCH_VOCAB"), *layers_env = getenv("PP_BENCH_LAYERS");
    const int VOCAB = vocab_env != NULL ? atoi(vocab_env) : 2048, layers = layers_env != NULL ? atoi(layers_env) : 4;
    char spec[640];
    bench_lm_spec(spec, sizeof spec, VOCAB, T, layers, NULL);
    const int64_t n = (int64_t)T * batch * (steps + 2) + 1;
    BenchLm lm = bench_prepare_lm(config, spec, "{\"type\": \"sgd\", \"lr\": 0.05}", T, batch, n, VOCAB);

    const long long before = rss_bytes();
    double loss = bench_lm_step(&lm);
    const long long activation = peak_rss_bytes() - before;
    printf("rank %d step 0 loss %.6f\n", lm.rank, loss);
    const double t0 = now();
    double bubble = 0.0, wall = 0.0, busy = 0.0, after = 0.0;
    for (int s = 1; s < steps; ++s) {
        loss = bench_lm_step(&lm);
        printf("rank %d step %d loss %.6f\n", lm.rank, s, loss);
        /* The pipeline's own measure of this stage's step (wall time, compute time, idle share). */
        char *ranks = NULL;
        CHECK(accel_accelerator_get_parallel_ranks_json(lm.acc, &ranks));
        const char *p = strstr(ranks, "\"last_step\"");
        if (p != NULL) {
            wall += strtod(strstr(p, "\"wall_seconds\": ") + 16, NULL);
            busy += strtod(strstr(p, "\"busy_seconds\": ") + 16, NULL);
            bubble += strtod(strstr(p, "\"bubble\": ") + 10, NULL);
            after += strtod(strstr(p, "\"after_schedule_seconds\": ") + 26, NULL);
        }
        accel_string_free(ranks);
    }
    const double seconds = now() - t0;
    const int timed = steps > 1 ? steps - 1 : 1;
    printf("rank %d world %d activation_bytes %lld step_seconds %.4f\n", lm.rank, lm.world, activation,
           steps > 1 ? seconds / (steps - 1) : 0.0);
    printf("rank %d schedule_wall %.4f schedule_busy %.4f bubble %.4f after_schedule %.4f\n", lm.rank, wall / timed, busy / timed,
           bubble / timed, after / timed);
    printf("rank %d tokens_per_s %.1f peak_bytes %lld\n", lm.rank, steps > 1 ? (double)T * batch * (steps - 1) / seconds : 0.0,
           peak_rss_bytes());
    bench_lm_free(&lm);
    return 0;
}
