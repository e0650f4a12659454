/* Small helpers shared by the C-API tests (plain C99, public API only). */
#ifndef ACCEL_CAPI_HELPERS_H
#define ACCEL_CAPI_HELPERS_H

#include "capi_test.h"

/* A float32 tensor of the given shape from `data` (NULL on failure, which is also counted). */
static inline accel_tensor_t *tensor_f32(const float *data, const int64_t *shape, size_t ndim)
{
    accel_tensor_t *t = NULL;
    size_t numel = 1, i;
    for (i = 0; i < ndim; ++i) numel *= (size_t)shape[i];
    CHECK_OK(accel_tensor_create(data, numel * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, ndim, &t));
    return t;
}

static inline accel_tensor_t *tensor_i64(const int64_t *data, const int64_t *shape, size_t ndim)
{
    accel_tensor_t *t = NULL;
    size_t numel = 1, i;
    for (i = 0; i < ndim; ++i) numel *= (size_t)shape[i];
    CHECK_OK(accel_tensor_create(data, numel * sizeof(int64_t), ACCEL_DTYPE_INT64, shape, ndim, &t));
    return t;
}

/* A 2-D float32 tensor [rows, cols]. */
static inline accel_tensor_t *matrix_f32(const float *data, int64_t rows, int64_t cols)
{
    int64_t shape[2];
    shape[0] = rows;
    shape[1] = cols;
    return tensor_f32(data, shape, 2);
}

/* Copies a float32 tensor of exactly `n` elements into `out`; returns 0 on success. */
static inline int read_f32(const accel_tensor_t *t, float *out, size_t n)
{
    accel_status_t st = accel_tensor_copy_to_buffer(t, out, n * sizeof(float));
    ++capi_checks;
    if (st != ACCEL_OK) {
        ++capi_failures;
        fprintf(stderr, "read_f32: %s: %s\n", accel_status_name(st), accel_last_error_message());
        return 1;
    }
    return 0;
}

/* Number of elements of a tensor (-1 on failure). */
static inline int64_t numel_of(const accel_tensor_t *t)
{
    int64_t n = -1;
    if (accel_tensor_get_numel(t, &n) != ACCEL_OK) return -1;
    return n;
}

/* Whether the tensor's shape is exactly `shape`. */
static inline int shape_is(const accel_tensor_t *t, const int64_t *shape, size_t ndim)
{
    int64_t got[16];
    size_t got_ndim = 0, i;
    if (t == NULL || accel_tensor_get_ndim(t, &got_ndim) != ACCEL_OK || got_ndim != ndim) return 0;
    if (accel_tensor_get_shape(t, got, 16) != ACCEL_OK) return 0;
    for (i = 0; i < ndim; ++i)
        if (got[i] != shape[i]) return 0;
    return 1;
}

static inline int shape2_is(const accel_tensor_t *t, int64_t a, int64_t b)
{
    int64_t s[2];
    s[0] = a;
    s[1] = b;
    return shape_is(t, s, 2);
}

/* A float32 copy of a model tensor (parameter or buffer) in a malloc'd array of *n elements. */
static inline float *model_tensor_f32(const accel_model_t *m, const char *name, size_t *n)
{
    accel_tensor_t *t = NULL;
    float *buf = NULL;
    int64_t count;
    *n = 0;
    CHECK_OK(accel_model_get_tensor(m, name, &t));
    if (t == NULL) return NULL;
    count = numel_of(t);
    buf = (float *)malloc((size_t)(count > 0 ? count : 1) * sizeof(float));
    if (buf != NULL && read_f32(t, buf, (size_t)count) == 0) *n = (size_t)count;
    accel_tensor_free(t);
    return buf;
}

/* Every parameter of `m` (float32, in parameter order) copied into `w` back to back, while they fit in `cap`
 * floats; returns how many elements the parameters have in all. */
static inline size_t read_params_f32(const accel_model_t *m, float *w, size_t cap)
{
    size_t count = 0, k, off = 0;
    CHECK_OK(accel_model_get_num_parameters(m, &count));
    for (k = 0; k < count; ++k) {
        const char *name = NULL;
        accel_tensor_t *p = NULL;
        CHECK_OK(accel_model_get_parameter_name(m, k, &name));
        CHECK_OK(accel_model_get_tensor(m, name, &p));
        if (p == NULL) continue;
        if (off + (size_t)numel_of(p) <= cap) read_f32(p, w + off, (size_t)numel_of(p));
        off += (size_t)numel_of(p);
        accel_tensor_free(p);
    }
    return off;
}

/* max |a[i] - b[i]| over n floats; INFINITY when a difference is NaN. */
static inline double max_abs_diff_f32(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > worst || d != d) worst = d != d ? INFINITY : d;
    }
    return worst;
}

/* max |a - b| over all parameters of two models with the same architecture (float32 parameters). */
static inline double max_param_diff(const accel_model_t *a, const accel_model_t *b)
{
    size_t count = 0, p;
    double worst = 0.0, d;
    CHECK_OK(accel_model_get_num_parameters(a, &count));
    for (p = 0; p < count; ++p) {
        const char *name = NULL;
        size_t na = 0, nb = 0;
        float *va, *vb;
        CHECK_OK(accel_model_get_parameter_name(a, p, &name));
        if (name == NULL) return INFINITY;
        va = model_tensor_f32(a, name, &na);
        vb = model_tensor_f32(b, name, &nb);
        if (va == NULL || vb == NULL || na != nb) {
            free(va);
            free(vb);
            return INFINITY;
        }
        d = max_abs_diff_f32(va, vb, na);
        if (d > worst) worst = d;
        free(va);
        free(vb);
    }
    return worst;
}

/* The integer after "key": in a JSON text such as the memory statistics (-1 when the key is missing). */
static inline long long json_int(const char *json, const char *key)
{
    char quoted[128];
    const char *at;
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    at = json != NULL ? strstr(json, quoted) : NULL;
    return at != NULL ? atoll(at + strlen(quoted)) : -1;
}

/* Up to `cap` bytes of the file at `path` into `buf`; returns how many were read (-1: it cannot be opened). */
static inline long read_file(const char *path, void *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    if (f == NULL) return -1;
    n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

/* `n` bytes of `data` as the file dir/name (counted as a check). */
static inline void write_file(const char *dir, const char *name, const void *data, size_t n)
{
    char path[1100];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(data, 1, n, f) == n);
    if (f != NULL) fclose(f);
}

/* A /proc/self/status value in MiB ("VmRSS:", "VmHWM:"; -1 when it cannot be read). */
static inline double status_mib(const char *key)
{
    char line[256];
    double kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, strlen(key)) == 0) kb = atof(line + strlen(key));
    fclose(f);
    return kb / 1024.0;
}

/* VmHWM restarts from the current RSS ("5" to /proc/self/clear_refs; counted as a check). */
static inline void reset_peak_rss(void)
{
    FILE *clear = fopen("/proc/self/clear_refs", "w");
    CHECK(clear != NULL);
    if (clear == NULL) return;
    fputs("5", clear);
    fclose(clear);
}

/* tests/capi/gpt_reference.py's GPT-2 (vocabulary 61, 16 positions) and its input: batch 2. */
enum { GPT_REF_B = 2, GPT_REF_T = 16, GPT_REF_V = 61 };

/* Runs `py script write dir` (dir made afresh): the reference's model.safetensors, config.json, input_ids.bin and
 * logits.bin. Returns 0 when it succeeded. */
static inline int gpt_reference_write(const char *py, const char *script, const char *dir)
{
    char cmd[1600];
    int rc;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s' && '%s' '%s' write '%s'", dir, dir, py, script, dir);
    rc = system(cmd);
    CHECK(rc == 0);
    return rc != 0;
}

/* max |logit of `m` (in eval mode) on dir/input_ids.bin - dir/logits.bin|, the reference's; INFINITY when a file
 * or the forward failed. */
static inline double gpt_reference_logits_diff(accel_model_t *m, const char *dir)
{
    enum { N = GPT_REF_B * GPT_REF_T, NV = GPT_REF_B * GPT_REF_T * GPT_REF_V };
    static int64_t ids[N];
    static float want[NV], got[NV];
    const int64_t shape[2] = {GPT_REF_B, GPT_REF_T};
    char path[1100];
    accel_tensor_t *x = NULL, *y = NULL;
    double worst = INFINITY;
    snprintf(path, sizeof path, "%s/input_ids.bin", dir);
    CHECK(read_file(path, ids, sizeof ids) == (long)sizeof ids);
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    CHECK(read_file(path, want, sizeof want) == (long)sizeof want);
    x = tensor_i64(ids, shape, 2);
    CHECK_OK(accel_model_forward_no_grad(m, x, &y));
    if (y != NULL && numel_of(y) == NV && read_f32(y, got, NV) == 0) worst = max_abs_diff_f32(got, want, NV);
    accel_tensor_free(x);
    accel_tensor_free(y);
    return worst;
}

/* The data the MLP references (frozen_reference.py, param_groups_reference.py) train on and read back: x float32
 * [n, 6] = 2 sin(0.37 i), y int64 [n] = i % 3, written raw as dir/x.bin and dir/y.bin (dir made afresh), and as
 * tensors in *x and *y. */
static inline void mlp_reference_data(const char *dir, int64_t n, accel_tensor_t **x, accel_tensor_t **y)
{
    float *xv = (float *)malloc((size_t)n * 6 * sizeof(float));
    int64_t *yv = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    const int64_t xs[2] = {n, 6}, ys[1] = {n};
    char cmd[1100];
    int64_t i;
    *x = *y = NULL;
    CHECK(xv != NULL && yv != NULL);
    if (xv == NULL || yv == NULL) {
        free(xv);
        free(yv);
        return;
    }
    for (i = 0; i < n * 6; ++i) xv[i] = sinf(0.37f * (float)i) * 2.0f;
    for (i = 0; i < n; ++i) yv[i] = i % 3;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", dir, dir);
    CHECK(system(cmd) == 0);
    write_file(dir, "x.bin", xv, (size_t)n * 6 * sizeof(float));
    write_file(dir, "y.bin", yv, (size_t)n * sizeof(int64_t));
    *x = tensor_f32(xv, xs, 2); /* accel_tensor_create copies */
    *y = tensor_i64(yv, ys, 1);
    free(xv);
    free(yv);
}

#endif /* ACCEL_CAPI_HELPERS_H */
