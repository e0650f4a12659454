/* GPUs (ctest label "cuda"): device placement, training on cuda:0 against the same training on the CPU, bf16 and
 * fp16 (with the loss scaler) on the GPU, checkpoints moving between GPU and CPU, tensors and DLPack with GPU
 * memory. Where this LibTorch sees no GPU it prints why and exits 77, which ctest reports as skipped. */
#include "capi_helpers.h"

#define NS 256
#define NIN 16
#define NOUT 4
#define EPOCHS 3

/* DLPack 0.x, declared as a C user without dlpack.h would (test_tensor.c has the same). */
typedef struct {
    int32_t device_type; /* kDLCPU = 1, kDLCUDA = 2 */
    int32_t device_id;
} cuda_DLDevice;
typedef struct {
    void *data;
    cuda_DLDevice device;
    int32_t ndim;
    struct {
        uint8_t code, bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} cuda_DLTensor;
typedef struct cuda_DLManagedTensor {
    cuda_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct cuda_DLManagedTensor *self);
} cuda_DLManagedTensor;

static const char *kMlp = "{\"type\": \"mlp\", \"widths\": [16, 64, 64, 4], \"activation\": \"relu\"}";

static char *device_of(const accel_accelerator_t *acc)
{
    char *s = NULL;
    CHECK_OK(accel_accelerator_get_device(acc, &s));
    return s;
}

static int tensor_on(const accel_tensor_t *t, const char *device)
{
    char *s = NULL;
    int same;
    CHECK_OK(accel_tensor_get_device(t, &s));
    same = s != NULL && strcmp(s, device) == 0;
    if (!same) fprintf(stderr, "tensor on %s, expected %s\n", s ? s : "(null)", device);
    accel_string_free(s);
    return same;
}

static accel_dataloader_t *make_loader(void)
{
    static float x[NS * NIN], y[NS * NOUT];
    accel_tensor_t *tx, *ty;
    accel_dataloader_t *dl = NULL;
    int i;
    for (i = 0; i < NS * NIN; ++i) x[i] = (float)sin(0.37 * (double)i);
    for (i = 0; i < NS; ++i) {
        int k;
        for (k = 0; k < NOUT; ++k) y[i * NOUT + k] = (float)(0.5 * x[i * NIN + k] - 0.25 * x[i * NIN + k + 4]);
    }
    tx = matrix_f32(x, NS, NIN);
    ty = matrix_f32(y, NS, NOUT);
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 32}", &dl));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    return dl;
}

typedef struct {
    accel_accelerator_t *acc;
    accel_model_t *model;
    accel_optimizer_t *opt;
    accel_dataloader_t *dl;
    double last_loss;
} Run;

/* A model seeded with `seed`, AdamW and the loader, prepared by an accelerator made from `config`. */
static void run_make(Run *r, const char *config, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    CHECK_OK(accel_accelerator_create(config, &r->acc));
    CHECK_OK(accel_random_set_seed(seed, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &r->model));
    CHECK_OK(accel_optimizer_create(r->model, "{\"type\": \"adamw\", \"lr\": 0.003}", &r->opt));
    r->dl = make_loader();
    CHECK_OK(accel_accelerator_prepare(r->acc, r->model, r->opt, r->dl, NULL));
}

/* Trains `epochs` passes; checks that every batch is on `device`. */
static void run_train(Run *r, int epochs, const char *device)
{
    int e;
    for (e = 0; e < epochs; ++e) {
        accel_batch_t *b = NULL;
        for (;;) {
            accel_tensor_t *in = NULL;
            CHECK_OK(accel_dataloader_next(r->dl, &b));
            if (b == NULL) break;
            CHECK_OK(accel_batch_get_inputs(b, &in));
            CHECK(in != NULL && tensor_on(in, device));
            accel_tensor_free(in);
            CHECK_OK(accel_accelerator_train_step(r->acc, r->model, r->opt, NULL, b, "mse", &r->last_loss));
            accel_batch_free(b);
        }
    }
}

static void run_free(Run *r)
{
    accel_dataloader_free(r->dl);
    accel_optimizer_free(r->opt);
    accel_model_free(r->model);
    accel_accelerator_free(r->acc);
}

static void test_devices(void)
{
    accel_accelerator_t *gpu = NULL, *cpu = NULL;
    char *s;
    CHECK_OK(accel_accelerator_create(NULL, &gpu));
    CHECK_OK(accel_accelerator_create("{\"cpu\": true}", &cpu));
    s = device_of(gpu);
    CHECK(s != NULL && strcmp(s, "cuda:0") == 0);
    accel_string_free(s);
    s = device_of(cpu);
    CHECK(s != NULL && strcmp(s, "cpu") == 0);
    accel_string_free(s);
    CHECK_FAILS(accel_accelerator_get_device(NULL, &s), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_get_device(gpu, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    accel_accelerator_free(gpu);
    accel_accelerator_free(cpu);
}

/* fp32 on the GPU trains to the CPU's weights (cuBLAS and the CPU's BLAS sum in other orders: 1e-4). Then
 * the GPU run's checkpoint loads on the CPU and both continue to the same weights, and the reverse. */
static void test_fp32_and_checkpoints(void)
{
    Run g, c, back;
    double d;
    accel_tensor_t *w = NULL, *x = NULL, *out = NULL;
    float input[2 * NIN], host[2 * NOUT];
    int i;

    run_make(&g, NULL, 7);
    run_make(&c, "{\"cpu\": true}", 7);
    CHECK_OK(accel_model_get_tensor(g.model, "0.weight", &w));
    CHECK(w != NULL && tensor_on(w, "cuda:0"));
    accel_tensor_free(w);
    run_train(&g, EPOCHS, "cuda:0");
    run_train(&c, EPOCHS, "cpu");
    d = max_param_diff(g.model, c.model);
    printf("fp32: GPU vs CPU after %d steps: max |dw| %.3g, losses %.6f / %.6f\n", EPOCHS * NS / 32, d, g.last_loss,
           c.last_loss);
    CHECK(d <= 1e-4);
    CHECK(fabs(g.last_loss - c.last_loss) <= 1e-4 * fabs(c.last_loss) + 1e-6);

    /* A host input goes to the GPU model; the output lives there and reads back. */
    for (i = 0; i < 2 * NIN; ++i) input[i] = (float)cos(0.1 * i);
    x = matrix_f32(input, 2, NIN);
    CHECK_OK(accel_model_forward(g.model, x, &out));
    CHECK(out != NULL && tensor_on(out, "cuda:0"));
    CHECK(out != NULL && read_f32(out, host, 2 * NOUT) == 0);
    {
        /* DLPack: exported as GPU memory without a copy, imported back as GPU memory. */
        void *exported = NULL;
        accel_tensor_t *again = NULL;
        float host2[2 * NOUT];
        CHECK_OK(accel_tensor_to_dlpack(out, &exported));
        CHECK(exported != NULL && ((cuda_DLManagedTensor *)exported)->dl_tensor.device.device_type == 2);
        CHECK(exported != NULL && ((cuda_DLManagedTensor *)exported)->dl_tensor.device.device_id == 0);
        CHECK_OK(accel_tensor_create_from_dlpack(exported, &again));
        CHECK(again != NULL && tensor_on(again, "cuda:0"));
        CHECK(again != NULL && read_f32(again, host2, 2 * NOUT) == 0 && memcmp(host, host2, sizeof host) == 0);
        accel_tensor_free(again);
    }
    accel_tensor_free(out);
    accel_tensor_free(x);

    /* GPU -> CPU: the weights and AdamW's moments come over exactly; one more pass each stays together. */
    CHECK_OK(accel_accelerator_save_state(g.acc, "cuda_ckpt_gpu"));
    run_free(&c);
    run_make(&c, "{\"cpu\": true}", 99);
    CHECK_OK(accel_accelerator_load_state(c.acc, "cuda_ckpt_gpu"));
    CHECK(max_param_diff(g.model, c.model) == 0.0);
    run_train(&g, 1, "cuda:0");
    run_train(&c, 1, "cpu");
    d = max_param_diff(g.model, c.model);
    printf("checkpoint GPU -> CPU, one more pass each: max |dw| %.3g\n", d);
    CHECK(d <= 1e-4);

    /* CPU -> GPU. */
    CHECK_OK(accel_accelerator_save_state(c.acc, "cuda_ckpt_cpu"));
    run_make(&back, NULL, 5);
    CHECK_OK(accel_accelerator_load_state(back.acc, "cuda_ckpt_cpu"));
    CHECK(max_param_diff(back.model, c.model) == 0.0);
    CHECK_OK(accel_model_get_tensor(back.model, "0.weight", &w));
    CHECK(w != NULL && tensor_on(w, "cuda:0"));
    accel_tensor_free(w);
    run_train(&back, 1, "cuda:0");
    run_train(&c, 1, "cpu");
    d = max_param_diff(back.model, c.model);
    printf("checkpoint CPU -> GPU, one more pass each: max |dw| %.3g\n", d);
    CHECK(d <= 1e-4);
    run_free(&back);
    run_free(&g);
    run_free(&c);
}

/* bf16 autocast and fp16 autocast with the dynamic loss scaler on the GPU: final losses near fp32's. */
static void test_mixed_precision(void)
{
    static const char *configs[3] = {NULL, "{\"mixed_precision\": \"bf16\"}", "{\"mixed_precision\": \"fp16\"}"};
    double loss[3];
    int k;
    for (k = 0; k < 3; ++k) {
        Run r;
        run_make(&r, configs[k], 11);
        run_train(&r, 2 * EPOCHS, "cuda:0");
        loss[k] = r.last_loss;
        run_free(&r);
    }
    printf("final losses on cuda:0: fp32 %.6f, bf16 %.6f (%+.2f %%), fp16 %.6f (%+.2f %%)\n", loss[0], loss[1],
           100.0 * (loss[1] - loss[0]) / loss[0], loss[2], 100.0 * (loss[2] - loss[0]) / loss[0]);
    CHECK(loss[0] < 0.05);
    CHECK(fabs(loss[1] - loss[0]) <= 0.05 * loss[0] + 1e-4);
    CHECK(fabs(loss[2] - loss[0]) <= 0.05 * loss[0] + 1e-4);
}

/* Sharded training is not placed on GPUs yet: refused at prepare, naming the plugin. */
static void test_sharding_refused(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    CHECK_OK(accel_accelerator_create("{\"fsdp_plugin\": {}}", &acc));
    CHECK_OK(accel_model_create_from_json(kMlp, &m));
    CHECK_FAILS(accel_accelerator_prepare_model(acc, m), ACCEL_ERR_UNIMPLEMENTED, "fsdp_plugin: sharded training on a GPU");
    accel_model_free(m);
    accel_accelerator_free(acc);
}

int main(void)
{
    accel_accelerator_t *probe = NULL;
    char *device = NULL;
    if (accel_accelerator_create(NULL, &probe) != ACCEL_OK || accel_accelerator_get_device(probe, &device) != ACCEL_OK ||
        strncmp(device, "cuda", 4) != 0) {
        printf("skipped: no GPU visible to this LibTorch (the accelerator's device is %s)\n",
               device ? device : accel_last_error_message());
        accel_string_free(device);
        accel_accelerator_free(probe);
        return 77;
    }
    accel_string_free(device);
    accel_accelerator_free(probe);
    test_devices();
    test_fp32_and_checkpoints();
    test_mixed_precision();
    test_sharding_refused();
    return capi_report("test_cuda");
}
