/*
 * Offload benchmark (a program, not a test; see BENCHMARKS.md, "Optimizer and parameter offload").
 *
 *   bench_offload_step NVME_DIR STEPS
 *
 * An MLP of four 2048 x 2048 layers (16.8 M parameters) with AdamW under deepspeed_plugin in one process,
 * trained STEPS steps (after 2 warm-up steps) in the same run: ZeRO-2 without offload (the baseline of the
 * optimizer rows), with offload_optimizer_device "cpu" and with "nvme"; then ZeRO-3 without offload (the
 * baseline of the parameter rows), with offload_param_device "nvme", and with both in files (NVME_DIR).
 * Prints the median step time, the ratio to its baseline, the optimizer state and parameters in memory after
 * a step, the optimizer state at most during one, and the bytes moved per step: the optimizer state read
 * before and written after each unit's step; each parameter shard read for the forward and the backward
 * all-gathers and for the step, and written after it.
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
    long long in_memory = 0, offloaded = 0, peak = 0, params = 0, params_out = 0;
    const char *p;
    if ((p = strstr(stats, "\"optimizer_state_bytes\": "))) in_memory = atoll(p + 25);
    if ((p = strstr(stats, "\"offloaded_bytes\": "))) offloaded = atoll(p + 19);
    if ((p = strstr(stats, "\"peak_optimizer_state_bytes\": "))) peak = atoll(p + 30);
    if ((p = strstr(stats, "\"parameter_bytes\": "))) params = atoll(p + 19);
    if ((p = strstr(stats, "\"offloaded_parameter_bytes\": "))) params_out = atoll(p + 29);
    const int opt_nvme = strstr(config, "offload_optimizer_nvme_path") != NULL;
    const int param_nvme = strstr(config, "offload_param_nvme_path") != NULL;
    const double moved = (opt_nvme ? 2.0 * offloaded : 0.0) + (param_nvme ? 4.0 * params_out : 0.0);
    printf("%-22s step %7.1f ms (x%.2f)  optimizer state in memory %6.1f MB after a step, %6.1f MB at most; "
           "parameters in memory %6.1f MB; moved %6.1f MB per step\n",
           name, ms, ms / *base_ms, in_memory / 1e6, peak / 1e6, params / 1e6, moved / 1e6);
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
    char nvme[4096], param[4096], both[4096];
    snprintf(nvme, sizeof nvme,
             "{\"deepspeed_plugin\": {\"zero_stage\": 2, \"offload_optimizer_device\": \"nvme\", "
             "\"offload_optimizer_nvme_path\": \"%s\"}}",
             argv[1]);
    snprintf(param, sizeof param,
             "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_param_device\": \"nvme\", "
             "\"offload_param_nvme_path\": \"%s\"}}",
             argv[1]);
    snprintf(both, sizeof both,
             "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_param_device\": \"nvme\", "
             "\"offload_param_nvme_path\": \"%s\", \"offload_optimizer_device\": \"nvme\", "
             "\"offload_optimizer_nvme_path\": \"%s\"}}",
             argv[1], argv[1]);
    double base = 0, base3 = 0;
    run("zero2", "{\"deepspeed_plugin\": {\"zero_stage\": 2}}", steps, &base);
    run("zero2 optimizer cpu", "{\"deepspeed_plugin\": {\"zero_stage\": 2, \"offload_optimizer_device\": \"cpu\"}}", steps, &base);
    run("zero2 optimizer nvme", nvme, steps, &base);
    run("zero3", "{\"deepspeed_plugin\": {\"zero_stage\": 3}}", steps, &base3);
    run("zero3 param nvme", param, steps, &base3);
    run("zero3 param+opt nvme", both, steps, &base3);
    return 0;
}
