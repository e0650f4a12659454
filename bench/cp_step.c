/* Context parallelism's cost and saving, through the real path (prepared token loader splitting each sequence,
 * train_step, DDP over dp_cp): peak activation memory of the first training step of a small GPT at T tokens, and
 * tokens per second over the following steps, in one process and under `accel launch -n 2
 * --parallelism_config_cp_size 2`; bench/cp_step.sh runs both strategies and prints the ratios. Each step's loss
 * is printed, so the script also checks that context parallelism trains as one process does; with a folder,
 * the state is saved after the steps, loaded back, and one more step's loss printed (checkpoints under cp).
 * "Activation memory" is the growth of the resident set during the first step over the resident set just
 * before it (SGD: no optimizer state appears in that step).
 * The same measures tensor parallelism with and without sequence parallelism (BENCH_ACCEL_CONFIG below).
 * Usage: bench_cp_step [T] [steps] [folder] */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define OK(call)                                                                                                       \
    do {                                                                                                               \
        accel_status_t st_ = (call);                                                                                   \
        if (st_ != ACCEL_OK) {                                                                                         \
            fprintf(stderr, "bench_cp_step: %s: %s: %s\n", #call, accel_status_name(st_), accel_last_error_message()); \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static long long rss_bytes(void)
{
    long long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%lld %lld", &pages, &resident) != 2) resident = -1;
    if (f) fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static long long peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)ru.ru_maxrss * 1024;
}

static double step(accel_accelerator_t *acc, accel_model_t *model, accel_optimizer_t *opt, accel_dataloader_t *dl)
{
    accel_batch_t *b = NULL;
    double loss = 0.0;
    OK(accel_dataloader_next(dl, &b));
    if (b == NULL) {
        fprintf(stderr, "bench_cp_step: the loader ran out of batches\n");
        exit(1);
    }
    OK(accel_accelerator_train_step(acc, model, opt, NULL, b, "causal_lm", &loss));
    accel_batch_free(b);
    return loss;
}

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 2048;
    const int steps = argc > 2 ? atoi(argv[2]) : 4;
    const char *folder = argc > 3 ? argv[3] : NULL;
    enum { VOCAB = 4096 };
    char spec[320];
    snprintf(spec, sizeof spec,
             "{\"type\": \"gpt\", \"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": 256, \"n_layer\": 4, \"n_head\": 8,"
             " \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}",
             VOCAB, T);
    const int64_t n = (int64_t)T * (steps + 2) + 1;
    int64_t *tokens = malloc((size_t)n * sizeof *tokens);
    for (int64_t i = 0; i < n; ++i) tokens[i] = (i * 7 + i / 13 + (i * i) % 29) % VOCAB;
    char dl_config[128];
    snprintf(dl_config, sizeof dl_config, "{\"block_size\": %d, \"batch_size\": 1}", T);

    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *stream = NULL;
    int64_t shape[1] = {n};
    int32_t rank = 0, world = 1;
    OK(accel_random_set_seed(0, false, false));
    /* BENCH_ACCEL_CONFIG: an accelerator config JSON (e.g. tensor parallelism with tp_handler.sequence_parallel). */
    OK(accel_accelerator_create(getenv("BENCH_ACCEL_CONFIG"), &acc));
    OK(accel_accelerator_get_process_index(acc, &rank));
    OK(accel_accelerator_get_num_processes(acc, &world));
    OK(accel_model_create_from_json(spec, &model));
    OK(accel_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.05}", &opt));
    OK(accel_tensor_create(tokens, (size_t)n * sizeof *tokens, ACCEL_DTYPE_INT64, shape, 1, &stream));
    OK(accel_dataloader_create_from_tokens(stream, dl_config, &dl));
    OK(accel_accelerator_prepare(acc, model, opt, dl, NULL));

    const long long before = rss_bytes(), peak_before = peak_rss_bytes();
    double loss = step(acc, model, opt, dl);
    const long long activation = peak_rss_bytes() - before;
    printf("rank %d step 0 loss %.6f\n", rank, loss);
    const double t0 = now();
    for (int s = 1; s < steps; ++s) {
        loss = step(acc, model, opt, dl);
        printf("rank %d step %d loss %.6f\n", rank, s, loss);
    }
    const double seconds = now() - t0;
    if (folder != NULL) {
        OK(accel_accelerator_save_state(acc, folder));
        OK(accel_accelerator_load_state(acc, folder));
        printf("rank %d resumed loss %.6f\n", rank, step(acc, model, opt, dl));
    }
    /* The whole batch's tokens per second (every rank of a cp group works on the same sequences). */
    printf("rank %d world %d activation_bytes %lld peak_before_bytes %lld tokens_per_s %.1f\n", rank, world, activation,
           peak_before, steps > 1 ? (double)T * (steps - 1) / seconds : 0.0);
    accel_dataloader_free(dl);
    accel_tensor_free(stream);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    free(tokens);
    return 0;
}
