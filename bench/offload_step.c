/*
 * Optimizer offload benchmark (a program, not a test; see BENCHMARKS.md, "Optimizer offload").
 *
 *   bench_offload_step NVME_DIR STEPS
 *
 * An MLP of four 2048 x 2048 layers (16.8 M parameters) with AdamW under deepspeed_plugin ZeRO-2 in one
 * process, trained STEPS steps (after 2 warm-up steps) three times in the same run: without offload (the
 * baseline), with offload_optimizer_device "cpu" and with "nvme" (state files under NVME_DIR). Prints the
 * median step time, the ratio to the baseline, the optimizer state in memory after a step and at most during
 * one, and the bytes moved per step (the state read before and written after each unit's step).
 */
#include "bench_common.h"

#include <string.h>

static void run(const char *name, const char *config, int steps, double *base_ms)
{
    accel_accelerator_t *acc = NULL;
    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(config, &acc));
    BenchMlp m = bench_mlp(acc, 0);
    double *t = malloc((size_t)steps * sizeof(double));
    for (int s = -2; s < steps; ++s) {
        const double seconds = bench_mlp_step(acc, &m);
        if (s >= 0) t[s] = seconds;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp);
    const double ms = t[steps / 2] * 1e3;
    if (*base_ms == 0) *base_ms = ms;
    char *stats = NULL;
    CHECK(accel_accelerator_get_memory_stats_json(acc, &stats));
    long long in_memory = 0, offloaded = 0, peak = 0;
    const char *p;
    if ((p = strstr(stats, "\"optimizer_state_bytes\": "))) in_memory = atoll(p + 25);
    if ((p = strstr(stats, "\"offloaded_bytes\": "))) offloaded = atoll(p + 19);
    if ((p = strstr(stats, "\"peak_optimizer_state_bytes\": "))) peak = atoll(p + 30);
    const int nvme = strstr(config, "nvme") != NULL;
    printf("%-16s step %7.1f ms (x%.2f)  optimizer state in memory %6.1f MB after a step, %6.1f MB at most; "
           "offloaded %6.1f MB; moved %6.1f MB per step\n",
           name, ms, ms / *base_ms, in_memory / 1e6, peak / 1e6, offloaded / 1e6, nvme ? 2.0 * offloaded / 1e6 : 0.0);
    accel_string_free(stats);
    free(t);
    bench_mlp_free(&m);
    accel_accelerator_free(acc);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_offload_step NVME_DIR STEPS\n");
        return 2;
    }
    const int steps = atoi(argv[2]);
    char nvme[4096];
    snprintf(nvme, sizeof nvme,
             "{\"deepspeed_plugin\": {\"zero_stage\": 2, \"offload_optimizer_device\": \"nvme\", "
             "\"offload_optimizer_nvme_path\": \"%s\"}}",
             argv[1]);
    double base = 0;
    run("no offload", "{\"deepspeed_plugin\": {\"zero_stage\": 2}}", steps, &base);
    run("offload cpu", "{\"deepspeed_plugin\": {\"zero_stage\": 2, \"offload_optimizer_device\": \"cpu\"}}", steps, &base);
    run("offload nvme", nvme, steps, &base);
    return 0;
}
