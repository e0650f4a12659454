/* Peak RSS and step time of GPT training: AdamW (backward + step), the baseline, vs LOMO / AdaLomo
 * (accel_accelerator_lomo_backward: the update inside backward, no whole-model gradient held). One optimizer type
 * per process, since peak RSS only grows; bench/lomo_memory.sh runs each and prints the ratios to AdamW.
 * Usage: bench_lomo_memory adamw|lomo|adalomo [steps] [extra optimizer JSON, e.g. ', "clip_grad_norm": 1.0'] */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OK(call)                                                                                                       \
    do {                                                                                                               \
        accel_status_t st_ = (call);                                                                                   \
        if (st_ != ACCEL_OK) {                                                                                         \
            fprintf(stderr, "%s: %s: %s\n", #call, accel_status_name(st_), accel_last_error_message());                \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

enum { B = 4, T = 128, VOCAB = 8192 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *type = argc > 1 ? argv[1] : "adamw";
    const int steps = argc > 2 ? atoi(argv[2]) : 3;
    const int lomo = strcmp(type, "adamw") != 0;
    /* ~29.5 M parameters: large enough that AdamW's gradients and moments dominate LibTorch's own footprint. */
    const char *spec = "{\"type\": \"gpt\", \"vocab_size\": 8192, \"n_positions\": 128, \"n_embd\": 512, \"n_layer\": 8,"
                       " \"n_head\": 8, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}";
    static int64_t tokens[B * T];
    int64_t shape[2] = {B, T};
    char config[256];
    snprintf(config, sizeof config, "{\"type\": \"%s\", \"lr\": 1e-4%s}", type, argc > 3 ? argv[3] : "");
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    OK(accel_random_set_seed(0, false, false));
    OK(accel_accelerator_create(NULL, &acc));
    OK(accel_model_create_from_json(spec, &model));
    OK(accel_optimizer_create(model, config, &opt));
    OK(accel_accelerator_prepare_model(acc, model));
    OK(accel_accelerator_prepare_optimizer(acc, opt));
    for (int i = 0; i < B * T; ++i) tokens[i] = (i * 7 + i / 13) % VOCAB;
    const double t0 = now();
    for (int s = 0; s < steps; ++s) {
        accel_tensor_t *in = NULL, *out = NULL, *loss = NULL;
        OK(accel_tensor_create(tokens, sizeof tokens, ACCEL_DTYPE_INT64, shape, 2, &in));
        OK(accel_model_forward(model, in, &out));
        OK(accel_loss_compute("causal_lm", out, in, &loss));
        if (lomo) {
            OK(accel_accelerator_lomo_backward(acc, loss, 1e-4));
        } else {
            OK(accel_accelerator_backward(acc, loss));
            OK(accel_optimizer_step(opt));
            OK(accel_optimizer_zero_grad(opt));
        }
        accel_tensor_free(in);
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    const double per_step = (now() - t0) / steps;
    char *stats = NULL;
    OK(accel_accelerator_get_memory_stats_json(acc, &stats));
    const char *peak = strstr(stats, "\"peak_rss_bytes\":");
    printf("%s %.3f %lld\n", type, per_step, peak ? atoll(peak + strlen("\"peak_rss_bytes\":")) : -1LL);
    accel_string_free(stats);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
