/* zero3_init_flag's memory: one process of a launch builds an MLP of eight 2048 x 2048 layers (33.6 M
 * parameters, 134 MB) under ZeRO-3 with the flag ("on") or without it ("off"), prepares it and takes a step;
 * prints this process's resident memory before building, and its peak while building, through prepare and
 * through the step (VmRSS / VmHWM), in MB. zero_init.sh runs both and prints the ratios.
 * Usage: accel launch -n 2 bench_zero_init on|off */
#include "bench_common.h"

#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "on") != 0 && strcmp(argv[1], "off") != 0)) {
        fprintf(stderr, "usage: accel launch -n 2 %s on|off\n", argv[0]);
        return 2;
    }
    const int on = strcmp(argv[1], "on") == 0;
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    CHECK(accel_accelerator_create(on ? "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"zero3_init_flag\": true}}"
                                      : "{\"deepspeed_plugin\": {\"zero_stage\": 3}}",
                                   &acc));
    int32_t rank = 0;
    CHECK(accel_process_get_index(&rank));
    const double before = status_mib("VmRSS:");
    CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2048, 2048, 2048, 2048, 2048, 2048, 2048, "
                                       "2048, 2048]}",
                                       &m));
    const double built = status_mib("VmHWM:");
    CHECK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.01}", &opt));
    CHECK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    const double prepared = status_mib("VmHWM:");
    float x[4 * 2048];
    for (int i = 0; i < 4 * 2048; ++i) x[i] = (float)((i * 7) % 13) / 13.0f;
    int64_t shape[2] = {4, 2048};
    accel_tensor_t *in = NULL, *out = NULL, *loss = NULL;
    CHECK(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, shape, 2, &in));
    CHECK(accel_model_forward(m, in, &out));
    CHECK(accel_loss_compute("mse", out, in, &loss));
    CHECK(accel_accelerator_backward(acc, loss));
    CHECK(accel_optimizer_step(opt));
    const double trained = status_mib("VmHWM:");
    printf("zero3_init_flag %-3s rank %d: RSS before building %.1f MB; peak while building %.1f MB (+%.1f); "
           "through prepare %.1f MB (+%.1f); through a step %.1f MB (+%.1f)\n",
           argv[1], rank, before, built, built - before, prepared, prepared - before, trained, trained - before);
    accel_tensor_free(in);
    accel_tensor_free(out);
    accel_tensor_free(loss);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    return 0;
}
