/* accel_model_quantize (Accelerate's load_and_quantize_model with a BnbQuantizationConfig): the state-dict keys
 * bitsandbytes writes, outputs near the float model's, refusals (NULLs, unknown keys by name, torch_dtype, a prepared
 * or already quantized model), training a quantized model's float head leaves the quantized bytes alone, and a saved
 * quantized model loads into another one. */
#include "capi_helpers.h"

#define IN 64
#define ROWS 3

static const char *kMlp = "{\"type\": \"mlp\", \"widths\": [64, 64, 4]}";

static int has_key(const accel_model_t *m, const char *key)
{
    size_t n = 0, i;
    CHECK_OK(accel_model_get_state_dict_size(m, &n));
    for (i = 0; i < n; ++i) {
        const char *k = NULL;
        CHECK_OK(accel_model_get_state_dict_key(m, i, &k));
        if (k != NULL && strcmp(k, key) == 0) return 1;
    }
    return 0;
}

static void forward(accel_model_t *m, accel_tensor_t *x, float *out)
{
    accel_tensor_t *y = NULL;
    CHECK_OK(accel_model_forward_no_grad(m, x, &y));
    if (y != NULL) read_f32(y, out, ROWS * 4);
    accel_tensor_free(y);
}

static double relative_error(const float *got, const float *want, size_t n)
{
    double d = 0, w = 0;
    size_t i;
    for (i = 0; i < n; ++i) {
        d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        w += (double)want[i] * want[i];
    }
    return sqrt(d / w);
}

static void test_keys_outputs_and_refusals(void)
{
    accel_model_t *m = NULL, *m8 = NULL;
    accel_tensor_t *x = NULL, *w = NULL;
    accel_dtype_t dtype = ACCEL_DTYPE_FLOAT32;
    float data[ROWS * IN], before[ROWS * 4], after[ROWS * 4];
    size_t i;
    for (i = 0; i < ROWS * IN; ++i) data[i] = (float)sin(0.37 * (double)i);
    x = matrix_f32(data, ROWS, IN);
    CHECK_OK(accel_random_set_seed(7, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &m));
    forward(m, x, before);

    CHECK_FAILS(accel_model_quantize(NULL, "{\"load_in_8bit\": true}"), ACCEL_ERR_INVALID_ARGUMENT, "model");
    CHECK_FAILS(accel_model_quantize(m, NULL), ACCEL_ERR_INVALID_ARGUMENT, "bnb_config_json");
    CHECK_FAILS(accel_model_quantize(m, "{\"load_in_4bit\": true, \"load_in_3bit\": true}"), ACCEL_ERR_INVALID_ARGUMENT,
                "load_in_3bit");
    CHECK_FAILS(accel_model_quantize(m, "{\"load_in_8bit\": true, \"torch_dtype\": \"float16\"}"), ACCEL_ERR_UNIMPLEMENTED,
                "torch_dtype");
    CHECK_FAILS(accel_model_quantize(m, "{\"load_in_4bit\": true}"), ACCEL_ERR_UNIMPLEMENTED, "fp16");
    CHECK_FAILS(accel_model_quantize(m, "{}"), ACCEL_ERR_INVALID_ARGUMENT, "can't be both false");

    CHECK_OK(accel_model_quantize(m, "{\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", "
                                     "\"bnb_4bit_use_double_quant\": true, \"bnb_4bit_compute_dtype\": \"fp32\"}"));
    CHECK(has_key(m, "0.weight") && has_key(m, "0.weight.absmax") && has_key(m, "0.weight.quant_map") &&
          has_key(m, "0.weight.nested_absmax") && has_key(m, "0.weight.nested_quant_map") &&
          has_key(m, "0.weight.quant_state.bitsandbytes__nf4"));
    CHECK(!has_key(m, "2.weight.absmax")); /* the last top-level module stays float (Accelerate's automatic skip) */
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &w));
    CHECK_OK(accel_tensor_get_dtype(w, &dtype));
    CHECK(dtype == ACCEL_DTYPE_UINT8 && shape2_is(w, IN * 64 / 2, 1));
    accel_tensor_free(w);
    forward(m, x, after);
    printf("test_quantize: nf4 output relative error %.4f\n", relative_error(after, before, ROWS * 4));
    CHECK(relative_error(after, before, ROWS * 4) < 0.2 && relative_error(after, before, ROWS * 4) > 1e-5);
    CHECK_FAILS(accel_model_quantize(m, "{\"load_in_8bit\": true}"), ACCEL_ERR_FAILED_PRECONDITION, "quantized already");

    CHECK_OK(accel_random_set_seed(7, false, false));
    CHECK_OK(accel_model_create_from_json(kMlp, &m8));
    CHECK_OK(accel_model_quantize(m8, "{\"load_in_8bit\": true}"));
    CHECK(has_key(m8, "0.SCB") && !has_key(m8, "0.weight.absmax"));
    CHECK_OK(accel_model_get_tensor(m8, "0.weight", &w));
    CHECK_OK(accel_tensor_get_dtype(w, &dtype));
    CHECK(dtype == ACCEL_DTYPE_INT8 && shape2_is(w, 64, IN));
    accel_tensor_free(w);
    forward(m8, x, after);
    printf("test_quantize: int8 output relative error %.5f\n", relative_error(after, before, ROWS * 4));
    CHECK(relative_error(after, before, ROWS * 4) < 0.02);
    accel_model_free(m8);
    accel_model_free(m);
    accel_tensor_free(x);
}

/* Training a quantized model: the float head learns, the int8 weights keep their bytes; quantizing a prepared
 * model is refused. Then save_model's file loads into another quantized model with the same outputs. */
static void test_train_save_load(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL, *other = NULL, *late = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    float data[ROWS * IN], target[ROWS * 4], q_before[64 * IN], q_after[64 * IN], a[ROWS * 4], b[ROWS * 4];
    accel_tensor_t *w = NULL;
    size_t i;
    for (i = 0; i < ROWS * IN; ++i) data[i] = (float)cos(0.11 * (double)i);
    for (i = 0; i < ROWS * 4; ++i) target[i] = (float)(i % 3) - 1.0f;
    x = matrix_f32(data, ROWS, IN);
    y = matrix_f32(target, ROWS, 4);
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_model_create_from_json(kMlp, &m));
    CHECK_OK(accel_model_quantize(m, "{\"load_in_8bit\": true}"));
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &w));
    CHECK_OK(accel_tensor_copy_to_buffer(w, q_before, 64 * IN)); /* int8: one byte each */
    accel_tensor_free(w);
    CHECK_OK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_accelerator_prepare_optimizer(acc, opt));
    for (i = 0; i < 3; ++i) {
        CHECK_OK(accel_model_forward(m, x, &out));
        CHECK_OK(accel_loss_compute("mse", out, y, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss));
        CHECK_OK(accel_optimizer_step(opt));
        CHECK_OK(accel_optimizer_zero_grad(opt));
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }
    CHECK_OK(accel_model_get_tensor(m, "0.weight", &w));
    CHECK_OK(accel_tensor_copy_to_buffer(w, q_after, 64 * IN));
    accel_tensor_free(w);
    CHECK(memcmp(q_before, q_after, 64 * IN) == 0);

    CHECK_OK(accel_model_create_from_json(kMlp, &late));
    CHECK_OK(accel_accelerator_prepare_model(acc, late));
    CHECK_FAILS(accel_model_quantize(late, "{\"load_in_8bit\": true}"), ACCEL_ERR_FAILED_PRECONDITION, "prepar");

    CHECK_OK(accel_accelerator_save_model(acc, m, "quantized_8bit", NULL));
    CHECK_OK(accel_model_create_from_json(kMlp, &other));
    CHECK_OK(accel_model_quantize(other, "{\"load_in_8bit\": true}"));
    CHECK_OK(accel_accelerator_prepare_model(acc, other)); /* on m's device: the same kernels, so equal bit for bit */
    forward(m, x, a);
    forward(other, x, b);
    CHECK(max_abs_diff_f32(a, b, ROWS * 4) > 0);
    CHECK_OK(accel_model_load_checkpoint(other, "quantized_8bit", "{\"strict\": true}"));
    forward(other, x, b);
    CHECK(max_abs_diff_f32(a, b, ROWS * 4) == 0);

    accel_model_free(other);
    accel_model_free(late);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    accel_tensor_free(x);
    accel_tensor_free(y);
}

/* "reference": the same float weights saved as they are and quantized three ways (NF4 + double quantization, FP4,
 * int8), checked bit for bit by bnb_reference.py (a reference of bitsandbytes' formats written from the spec). Layer
 * 0 has an odd count (33 x 65: a partial last block and a padded nibble), layer 4 320 blocks (two nested blocks). */
static int test_reference(void)
{
    static const char *kinds[] = {"float", "nf4", "fp4", "int8"};
    static const char *configs[] = {
        NULL, "{\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true, "
              "\"bnb_4bit_compute_dtype\": \"fp32\"}",
        "{\"load_in_4bit\": true, \"bnb_4bit_compute_dtype\": \"fp32\"}", "{\"load_in_8bit\": true}"};
    const char *py = getenv("ACCEL_PYTHON"), *script = getenv("ACCEL_BNB_REFERENCE");
    accel_accelerator_t *acc = NULL;
    char dir[256], cmd[1200];
    int k, rc;
    if (py == NULL || py[0] == '\0' || script == NULL) {
        fprintf(stderr, "test_quantize reference: ACCEL_PYTHON (with torch) and ACCEL_BNB_REFERENCE must be set\n");
        return 1;
    }
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    for (k = 0; k < 4; ++k) {
        accel_model_t *m = NULL;
        CHECK_OK(accel_random_set_seed(11, false, false));
        CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [33, 65, 128, 160, 4]}", &m));
        if (configs[k] != NULL) CHECK_OK(accel_model_quantize(m, configs[k]));
        snprintf(dir, sizeof dir, "bnb_ref/%s", kinds[k]);
        CHECK_OK(accel_accelerator_save_model(acc, m, dir, NULL));
        accel_model_free(m);
    }
    accel_accelerator_free(acc);
    snprintf(cmd, sizeof cmd, "\"%s\" \"%s\" bnb_ref", py, script);
    rc = system(cmd);
    CHECK(rc == 0);
    return capi_report("test_quantize reference");
}

/* "prequantized": Hugging Face folders as transformers saves a bitsandbytes-quantized llama (config.json's
 * quantization_config; NF4 + double quantization, FP4, int8 with weight_format), written by bnb_reference.py, load
 * through accel_model_from_pretrained and give the logits the reference computes from the dequantized weights;
 * save_pretrained writes the same tensors and quantization_config back (bnb_reference.py roundtrip), and that folder
 * loads with the same logits bit for bit. Damaged folders and other quant_methods fail naming what is wrong. */
#define PQ_T 8
#define PQ_VOCAB 96

static int run_reference(const char *py, const char *script, const char *args)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "\"%s\" \"%s\" %s", py, script, args);
    return system(cmd);
}

static void prequantized_logits(accel_model_t *m, const int64_t *ids, float *out)
{
    const int64_t shape[2] = {1, PQ_T};
    accel_tensor_t *x = tensor_i64(ids, shape, 2), *y = NULL;
    CHECK_OK(accel_model_forward_no_grad(m, x, &y));
    if (y != NULL) read_f32(y, out, PQ_T * PQ_VOCAB);
    accel_tensor_free(y);
    accel_tensor_free(x);
}

static void prequantized_kind(const char *py, const char *script, const char *kind, accel_dtype_t weight_dtype)
{
    static float want[PQ_T * PQ_VOCAB], got[PQ_T * PQ_VOCAB], again[PQ_T * PQ_VOCAB];
    int64_t ids[PQ_T];
    char dir[256], path[300], saved[300], args[700];
    accel_model_t *m = NULL, *back = NULL;
    accel_tensor_t *w = NULL;
    accel_dtype_t dtype = ACCEL_DTYPE_FLOAT32;
    double scale = 0;
    size_t i;
    snprintf(dir, sizeof dir, "prequantized/%s", kind);
    snprintf(path, sizeof path, "%s/ids.i64", dir);
    CHECK(read_file(path, ids, sizeof ids) == (long)sizeof ids);
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    CHECK(read_file(path, want, sizeof want) == (long)sizeof want);
    CHECK_OK(accel_model_from_pretrained(dir, NULL, &m));
    if (m == NULL) return;
    CHECK_OK(accel_model_get_tensor(m, "model.layers.1.mlp.down_proj.weight", &w));
    CHECK_OK(accel_tensor_get_dtype(w, &dtype));
    CHECK(dtype == weight_dtype);
    accel_tensor_free(w);
    prequantized_logits(m, ids, got);
    for (i = 0; i < PQ_T * PQ_VOCAB; ++i) scale = fmax(scale, fabs((double)want[i]));
    /* The same dequantized values through float32 matmuls in another order (Python's reference): rounding only. */
    printf("test_quantize prequantized %s: logits max |diff| %.3g (max |logit| %.3g)\n", kind,
           max_abs_diff_f32(got, want, PQ_T * PQ_VOCAB), scale);
    CHECK(max_abs_diff_f32(got, want, PQ_T * PQ_VOCAB) <= 1e-5 * scale);

    snprintf(saved, sizeof saved, "prequantized/saved_%s", kind);
    CHECK_OK(accel_model_save_pretrained(m, saved, NULL));
    snprintf(args, sizeof args, "roundtrip %s %s", dir, saved);
    CHECK(run_reference(py, script, args) == 0);
    CHECK_OK(accel_model_from_pretrained(saved, NULL, &back));
    if (back != NULL) prequantized_logits(back, ids, again);
    CHECK(memcmp(got, again, sizeof got) == 0);
    accel_model_free(back);
    accel_model_free(m);
}

static int test_prequantized(void)
{
    static const struct {
        const char *dir;
        accel_status_t code;
        const char *names;
    } bad[] = {
        {"bad_shape", ACCEL_ERR_INVALID_ARGUMENT, "model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4"},
        {"bad_quant_type", ACCEL_ERR_INVALID_ARGUMENT, "q_proj.weight.quant_state.bitsandbytes__nf4: says quant_type"},
        {"bad_json", ACCEL_ERR_INVALID_ARGUMENT, "model.layers.0.self_attn.q_proj.weight.quant_state"},
        {"bad_nan", ACCEL_ERR_INVALID_ARGUMENT, "model.layers.0.self_attn.q_proj.weight.nested_absmax"},
        {"bad_missing", ACCEL_ERR_INVALID_ARGUMENT, "model.layers.0.self_attn.q_proj.weight.nested_absmax"},
        {"bad_absmax", ACCEL_ERR_INVALID_ARGUMENT, "model.layers.0.self_attn.q_proj.weight.absmax"},
        {"bad_scb", ACCEL_ERR_INVALID_ARGUMENT, "model.layers.1.mlp.up_proj.SCB"},
        {"bad_weight_format", ACCEL_ERR_UNIMPLEMENTED, "model.layers.1.mlp.up_proj.weight_format"},
        {"bad_gptq", ACCEL_ERR_UNIMPLEMENTED, "\"gptq\""},
        {"bad_awq", ACCEL_ERR_UNIMPLEMENTED, "\"awq\""},
    };
    const char *py = getenv("ACCEL_PYTHON"), *script = getenv("ACCEL_BNB_REFERENCE");
    char dir[256];
    size_t i;
    if (py == NULL || py[0] == '\0' || script == NULL) {
        fprintf(stderr, "test_quantize prequantized: ACCEL_PYTHON (with torch) and ACCEL_BNB_REFERENCE must be set\n");
        return 1;
    }
    CHECK(run_reference(py, script, "prequantized prequantized") == 0);
    prequantized_kind(py, script, "nf4", ACCEL_DTYPE_UINT8);
    prequantized_kind(py, script, "fp4", ACCEL_DTYPE_UINT8);
    prequantized_kind(py, script, "int8", ACCEL_DTYPE_INT8);
    for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        accel_model_t *m = NULL;
        snprintf(dir, sizeof dir, "prequantized/%s", bad[i].dir);
        CHECK_FAILS(accel_model_from_pretrained(dir, NULL, &m), bad[i].code, bad[i].names);
        CHECK(m == NULL);
        accel_model_free(m);
    }
    return capi_report("test_quantize prequantized");
}

/* The engines that split or re-type weights are refused by name for a quantized model (prepare). */
static void test_refused_under_parallelism(void)
{
    /* "cpu": sharded training on a GPU is refused before the model's quantization is looked at. */
    static const char *const configs[][2] = {{"{\"cpu\": true, \"fsdp_plugin\": {}}", "fsdp_plugin"},
                                             {"{\"cpu\": true, \"deepspeed_plugin\": {\"zero_stage\": 2}}", "deepspeed_plugin"},
                                             {"{\"mixed_precision\": \"fp8\"}", "fp8"}};
    size_t i;
    for (i = 0; i < sizeof configs / sizeof configs[0]; ++i) {
        accel_accelerator_t *acc = NULL;
        accel_model_t *m = NULL;
        CHECK_OK(accel_accelerator_create(configs[i][0], &acc));
        CHECK_OK(accel_model_create_from_json(kMlp, &m));
        CHECK_OK(accel_accelerator_prepare_model(acc, m)); /* the same model unquantized is fine */
        accel_model_free(m);
        m = NULL;
        accel_accelerator_free(acc);
        acc = NULL;
        CHECK_OK(accel_accelerator_create(configs[i][0], &acc));
        CHECK_OK(accel_model_create_from_json(kMlp, &m));
        CHECK_OK(accel_model_quantize(m, "{\"load_in_8bit\": true}"));
        CHECK_FAILS(accel_accelerator_prepare_model(acc, m), ACCEL_ERR_UNIMPLEMENTED, configs[i][1]);
        accel_model_free(m);
        accel_accelerator_free(acc);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "reference") == 0) return test_reference();
    if (argc > 1 && strcmp(argv[1], "prequantized") == 0) return test_prequantized();
    test_keys_outputs_and_refusals();
    test_train_save_load();
    test_refused_under_parallelism();
    return capi_report("test_quantize");
}
