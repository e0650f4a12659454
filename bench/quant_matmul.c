/* Quantized linear layers (accel_model_quantize) on this CPU: the forward of one K x N linear layer (the first of
 * an MLP [K, N, 8]; the last layer stays float, Accelerate's automatic skip) at T tokens, in float32, in bf16
 * autocast, as LLM.int8 (int8 weights, int32 matmul), and as NF4 with fp32 and bf16 compute (the weight
 * dequantized at each forward), in the same run; median of REPS forwards, GFLOP/s (2 T K N) and the ratio to
 * float32. Usage: bench_quant_matmul [K N T REPS] (default 4096 4096 64 20). */
#include "bench_common.h"

#include <string.h>

static double median_forward(accel_model_t *m, accel_tensor_t *x, int reps, accel_accelerator_t *autocast)
{
    double t[64];
    int i;
    if (reps > 64) reps = 64;
    for (i = -2; i < reps; ++i) { /* two warm-up forwards */
        accel_tensor_t *y = NULL;
        double t0;
        if (autocast) CHECK(accel_accelerator_autocast_begin(autocast));
        t0 = now();
        CHECK(accel_model_forward_no_grad(m, x, &y));
        if (i >= 0) t[i] = now() - t0;
        if (autocast) CHECK(accel_accelerator_autocast_end(autocast));
        accel_tensor_free(y);
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    return t[reps / 2];
}

int main(int argc, char **argv)
{
    const long long K = argc > 4 ? atoll(argv[1]) : 4096, N = argc > 4 ? atoll(argv[2]) : 4096;
    const long long T = argc > 4 ? atoll(argv[3]) : 64;
    const int reps = argc > 4 ? atoi(argv[4]) : 20;
    const char *configs[] = {NULL, NULL, "{\"load_in_8bit\": true}",
                             "{\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_compute_dtype\": \"fp32\"}",
                             "{\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_compute_dtype\": \"bf16\"}"};
    const char *names[] = {"float32", "bf16 autocast", "int8 (LLM.int8)", "nf4, fp32 compute", "nf4, bf16 compute"};
    char spec[128];
    float *data = malloc((size_t)(T * K) * sizeof(float));
    int64_t shape[2];
    accel_tensor_t *x = NULL;
    accel_accelerator_t *bf16 = NULL;
    double base = 0;
    long long i;
    int c;
    for (i = 0; i < T * K; ++i) data[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    shape[0] = T;
    shape[1] = K;
    CHECK(accel_tensor_create(data, (size_t)(T * K) * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 2, &x));
    CHECK(accel_accelerator_create("{\"mixed_precision\": \"bf16\", \"cpu\": true}", &bf16));
    snprintf(spec, sizeof spec, "{\"type\": \"mlp\", \"widths\": [%lld, %lld, 8]}", K, N);
    printf("quant_matmul: K %lld, N %lld, T %lld, median of %d forwards\n", K, N, T, reps);
    for (c = 0; c < 5; ++c) {
        accel_model_t *m = NULL;
        double s;
        CHECK(accel_random_set_seed(1, false, false));
        CHECK(accel_model_create_from_json(spec, &m));
        if (configs[c]) CHECK(accel_model_quantize(m, configs[c]));
        s = median_forward(m, x, reps, c == 1 ? bf16 : NULL);
        if (c == 0) base = s;
        printf("%-20s %9.3f ms  %7.2f GFLOP/s  %5.2fx float32's time\n", names[c], s * 1e3,
               2.0 * (double)T * (double)K * (double)N / s / 1e9, s / base);
        accel_model_free(m);
    }
    accel_accelerator_free(bf16);
    accel_tensor_free(x);
    free(data);
    return 0;
}
