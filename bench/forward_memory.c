/* Evaluation without the autograd graph: peak memory and time of accel_model_forward_no_grad against
 * accel_model_forward in eval mode (which, as in PyTorch, still keeps every activation for a backward), on a
 * 4-layer GPT-2 (n_embd 256, 8 x 256 tokens), each output held until the next forward as an evaluation loop
 * holds its logits. Peak RSS is measured in a fresh child process per mode (ru_maxrss over the process's
 * baseline after building the model), so one mode's freed pages cannot hide the other's.
 *   bench_forward_memory [rounds]   (default 5) */
#include "bench_common.h"

#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

enum { B = 8, T = 256 };

static long maxrss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* One mode in this process: prints "<peak MB over baseline> <median ms>". */
static int run_mode(int no_grad, int rounds)
{
    accel_model_t *m = NULL;
    int64_t ids[B * T], shape[2] = {B, T};
    for (int i = 0; i < B * T; ++i) ids[i] = (i * 7919) % 256;
    CHECK(accel_random_set_seed(1, false, false));
    CHECK(accel_model_create_from_json("{\"type\": \"gpt\", \"vocab_size\": 256, \"n_positions\": 256, \"n_embd\": 256,"
                                       " \"n_layer\": 4, \"n_head\": 4}",
                                       &m));
    CHECK(accel_model_eval(m));
    accel_tensor_t *x = NULL, *out = NULL;
    CHECK(accel_tensor_create(ids, sizeof ids, ACCEL_DTYPE_INT64, shape, 2, &x));
    const long base = maxrss_kb();
    double ms[64];
    for (int r = 0; r < rounds && r < 64; ++r) {
        accel_tensor_t *next = NULL;
        const double t0 = now();
        CHECK(no_grad ? accel_model_forward_no_grad(m, x, &next) : accel_model_forward(m, x, &next));
        ms[r] = (now() - t0) * 1e3;
        accel_tensor_free(out); /* the previous logits (and, with a graph, its activations) go now */
        out = next;
    }
    qsort(ms, (size_t)rounds, sizeof ms[0], cmp);
    printf("%.1f %.2f\n", (double)(maxrss_kb() - base) / 1024.0, ms[rounds / 2]);
    accel_tensor_free(out);
    accel_tensor_free(x);
    accel_model_free(m);
    return 0;
}

static void measure(const char *self, const char *mode, int rounds, double *mb, double *ms)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --mode %s %d", self, mode, rounds);
    FILE *p = popen(cmd, "r");
    if (p == NULL || fscanf(p, "%lf %lf", mb, ms) != 2) {
        fprintf(stderr, "bench_forward_memory: the %s child failed\n", mode);
        exit(1);
    }
    pclose(p);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--mode") == 0) return run_mode(strcmp(argv[2], "no_grad") == 0, atoi(argv[3]));
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: %s [rounds 1..64]\n", argv[0]);
        return 2;
    }
    double grad_mb, grad_ms, none_mb, none_ms;
    measure(argv[0], "grad", rounds, &grad_mb, &grad_ms);
    measure(argv[0], "no_grad", rounds, &none_mb, &none_ms);
    printf("GPT-2 4x256, %dx%d tokens, eval mode, %d forwards\n", B, T, rounds);
    printf("  forward          peak +%7.1f MB   %7.2f ms (median)\n", grad_mb, grad_ms);
    printf("  forward_no_grad  peak +%7.1f MB   %7.2f ms (median)\n", none_mb, none_ms);
    printf("  no_grad / forward: memory %.2fx, time %.2fx\n", none_mb / grad_mb, none_ms / grad_ms);
    return 0;
}
