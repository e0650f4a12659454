/* accel/tensor.h: creating tensors from caller buffers, reading them back, DLPack, and every bad input. */
#include "capi_test.h"

/* DLPack 0.x (as in dlpack.h, DLPACK_VERSION < 100), declared here as a C user without dlpack.h would. */
typedef struct {
    int32_t device_type; /* DLDeviceType: kDLCPU = 1, kDLCUDA = 2 */
    int32_t device_id;
} test_DLDevice;
typedef struct {
    uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLOpaqueHandle 3, kDLBfloat 4 */
    uint8_t bits;
    uint16_t lanes;
} test_DLDataType;
typedef struct {
    void *data;
    test_DLDevice device;
    int32_t ndim;
    test_DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} test_DLTensor;
typedef struct test_DLManagedTensor {
    test_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct test_DLManagedTensor *self);
} test_DLManagedTensor;

/* Creates a tensor, checks dtype/ndim/shape/numel/nbytes, reads the bytes back and compares. */
static void roundtrip(accel_dtype_t dtype, const void *data, size_t nbytes, const int64_t *shape, size_t ndim)
{
    accel_tensor_t *t = NULL;
    accel_dtype_t got_dtype = -1;
    size_t got_ndim = 99, got_nbytes = 0, elem = 0, i;
    int64_t got_shape[16];
    int64_t numel = -1, expect_numel = 1;
    unsigned char back[256];

    for (i = 0; i < ndim; ++i) expect_numel *= shape[i];
    CHECK_OK(accel_tensor_create(data, nbytes, dtype, shape, ndim, &t));
    CHECK(t != NULL);
    if (t == NULL) return;
    CHECK_OK(accel_tensor_get_dtype(t, &got_dtype));
    CHECK(got_dtype == dtype);
    CHECK_OK(accel_tensor_get_ndim(t, &got_ndim));
    CHECK(got_ndim == ndim);
    memset(got_shape, 0xff, sizeof got_shape);
    CHECK_OK(accel_tensor_get_shape(t, got_shape, 16));
    for (i = 0; i < ndim; ++i) CHECK(got_shape[i] == shape[i]);
    CHECK(got_shape[ndim] == -1); /* nothing written past ndim */
    CHECK_OK(accel_tensor_get_shape(t, got_shape, ndim)); /* exactly enough room */
    CHECK_OK(accel_tensor_get_numel(t, &numel));
    CHECK(numel == expect_numel);
    CHECK_OK(accel_tensor_get_nbytes(t, &got_nbytes));
    CHECK(got_nbytes == nbytes);
    CHECK_OK(accel_dtype_get_size(dtype, &elem));
    CHECK(got_nbytes == (size_t)expect_numel * elem);
    memset(back, 0xab, sizeof back);
    CHECK(nbytes <= sizeof back);
    CHECK_OK(accel_tensor_copy_to_buffer(t, back, nbytes));
    CHECK(memcmp(back, data, nbytes) == 0);
    accel_tensor_free(t);
}

static void test_every_dtype(void)
{
    const int64_t shape23[2] = {2, 3};
    const int64_t shape6[1] = {6};
    const int64_t shape3111[4] = {3, 1, 1, 1};
    const float f32[6] = {0.5f, -1.0f, 2.25f, 3.0f, -4.5f, 1e-3f};
    const double f64[6] = {0.1, -2.5, 3.75, 1e300, -1e-300, 0.0};
    const uint16_t f16[6] = {0x3C00, 0xBC00, 0x4000, 0x3800, 0x0000, 0x7BFF}; /* 1, -1, 2, 0.5, 0, 65504 */
    const uint16_t bf16[6] = {0x3F80, 0xBF80, 0x4000, 0x3F00, 0x0000, 0x4049};
    const int8_t i8[6] = {-128, -1, 0, 1, 100, 127};
    const uint8_t u8[6] = {0, 1, 2, 128, 254, 255};
    const int16_t i16[6] = {-32768, -2, 0, 3, 1000, 32767};
    const int32_t i32[6] = {INT32_MIN, -7, 0, 9, 123456, INT32_MAX};
    const int64_t i64[6] = {INT64_MIN, -5, 0, 11, (int64_t)1 << 40, INT64_MAX};
    const uint8_t b[3] = {1, 0, 1};

    roundtrip(ACCEL_DTYPE_FLOAT32, f32, sizeof f32, shape23, 2);
    roundtrip(ACCEL_DTYPE_FLOAT64, f64, sizeof f64, shape6, 1);
    roundtrip(ACCEL_DTYPE_FLOAT16, f16, sizeof f16, shape23, 2);
    roundtrip(ACCEL_DTYPE_BFLOAT16, bf16, sizeof bf16, shape23, 2);
    roundtrip(ACCEL_DTYPE_INT8, i8, sizeof i8, shape6, 1);
    roundtrip(ACCEL_DTYPE_UINT8, u8, sizeof u8, shape23, 2);
    roundtrip(ACCEL_DTYPE_INT16, i16, sizeof i16, shape6, 1);
    roundtrip(ACCEL_DTYPE_INT32, i32, sizeof i32, shape23, 2);
    roundtrip(ACCEL_DTYPE_INT64, i64, sizeof i64, shape6, 1);
    {
        const int64_t shape3[1] = {3};
        roundtrip(ACCEL_DTYPE_BOOL, b, sizeof b, shape3, 1);
        roundtrip(ACCEL_DTYPE_BOOL, b, 1, NULL, 0); /* a scalar */
    }
    roundtrip(ACCEL_DTYPE_FLOAT32, f32, 3 * sizeof(float), shape3111, 4);
}

static void test_scalars_and_empty(void)
{
    accel_tensor_t *t = NULL;
    const double pi = 3.25;
    double item = 0.0;
    size_t ndim = 9, nbytes = 9;
    int64_t numel = -1;
    const int64_t empty_shape[2] = {0, 3};
    int64_t shape_out[2] = {-1, -1};

    /* A scalar: ndim 0, shape may be NULL. */
    CHECK_OK(accel_tensor_create(&pi, sizeof pi, ACCEL_DTYPE_FLOAT64, NULL, 0, &t));
    CHECK_OK(accel_tensor_get_ndim(t, &ndim));
    CHECK(ndim == 0);
    CHECK_OK(accel_tensor_get_numel(t, &numel));
    CHECK(numel == 1);
    CHECK_OK(accel_tensor_get_shape(t, NULL, 0));
    CHECK_OK(accel_tensor_get_item(t, &item));
    CHECK(item == 3.25);
    accel_tensor_free(t);
    t = NULL;

    /* An empty tensor: data may be NULL when nbytes == 0. */
    CHECK_OK(accel_tensor_create(NULL, 0, ACCEL_DTYPE_FLOAT32, empty_shape, 2, &t));
    CHECK(t != NULL);
    CHECK_OK(accel_tensor_get_numel(t, &numel));
    CHECK(numel == 0);
    CHECK_OK(accel_tensor_get_nbytes(t, &nbytes));
    CHECK(nbytes == 0);
    CHECK_OK(accel_tensor_get_shape(t, shape_out, 2));
    CHECK(shape_out[0] == 0 && shape_out[1] == 3);
    CHECK_OK(accel_tensor_copy_to_buffer(t, NULL, 0));
    CHECK_FAILS(accel_tensor_get_item(t, &item), ACCEL_ERR_INVALID_ARGUMENT, "one element");
    accel_tensor_free(t);
}

static void test_get_item(void)
{
    struct {
        accel_dtype_t dtype;
        unsigned char bytes[8];
        double expect;
    } cases[] = {
        {ACCEL_DTYPE_FLOAT32, {0}, -1.5},
        {ACCEL_DTYPE_FLOAT64, {0}, 0.125},
        {ACCEL_DTYPE_INT32, {0}, -42},
        {ACCEL_DTYPE_INT64, {0}, 1099511627776.0},
        {ACCEL_DTYPE_UINT8, {0}, 200},
    };
    const float f = -1.5f;
    const double d = 0.125;
    const int32_t i = -42;
    const int64_t l = (int64_t)1 << 40;
    const uint8_t u = 200;
    const uint16_t half_two = 0x4000, bf_three = 0x4040;
    const uint8_t yes = 1;
    const int64_t one[1] = {1};
    const int64_t three[1] = {3};
    const float three_f[3] = {1, 2, 3};
    accel_tensor_t *t = NULL;
    double item = 0.0;
    size_t k;

    memcpy(cases[0].bytes, &f, sizeof f);
    memcpy(cases[1].bytes, &d, sizeof d);
    memcpy(cases[2].bytes, &i, sizeof i);
    memcpy(cases[3].bytes, &l, sizeof l);
    memcpy(cases[4].bytes, &u, sizeof u);
    for (k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        size_t size = 0;
        CHECK_OK(accel_dtype_get_size(cases[k].dtype, &size));
        CHECK_OK(accel_tensor_create(cases[k].bytes, size, cases[k].dtype, one, 1, &t));
        item = 0.0;
        CHECK_OK(accel_tensor_get_item(t, &item));
        CHECK(item == cases[k].expect);
        accel_tensor_free(t);
        t = NULL;
    }
    CHECK_OK(accel_tensor_create(&half_two, 2, ACCEL_DTYPE_FLOAT16, NULL, 0, &t));
    CHECK_OK(accel_tensor_get_item(t, &item));
    CHECK(item == 2.0);
    accel_tensor_free(t);
    CHECK_OK(accel_tensor_create(&bf_three, 2, ACCEL_DTYPE_BFLOAT16, NULL, 0, &t));
    CHECK_OK(accel_tensor_get_item(t, &item));
    CHECK(item == 3.0);
    accel_tensor_free(t);
    CHECK_OK(accel_tensor_create(&yes, 1, ACCEL_DTYPE_BOOL, NULL, 0, &t));
    CHECK_OK(accel_tensor_get_item(t, &item));
    CHECK(item == 1.0);
    accel_tensor_free(t);

    /* More than one element. */
    CHECK_OK(accel_tensor_create(three_f, sizeof three_f, ACCEL_DTYPE_FLOAT32, three, 1, &t));
    item = 7.0;
    CHECK_FAILS(accel_tensor_get_item(t, &item), ACCEL_ERR_INVALID_ARGUMENT, "one element");
    CHECK_FAILS(accel_tensor_get_item(t, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_tensor_get_item(NULL, &item), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    accel_tensor_free(t);
}

static void test_create_bad_inputs(void)
{
    const float data[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape23[2] = {2, 3};
    const int64_t negative[2] = {2, -3};
    int64_t big[17];
    accel_tensor_t *t = (accel_tensor_t *)&t; /* not NULL: a failure must reset it */
    size_t i;

    for (i = 0; i < 17; ++i) big[i] = 1;

    /* NULL out. */
    CHECK_FAILS(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT32, shape23, 2, NULL),
                ACCEL_ERR_INVALID_ARGUMENT, "out");

    /* NULL data with nbytes > 0. */
    CHECK_FAILS(accel_tensor_create(NULL, sizeof data, ACCEL_DTYPE_FLOAT32, shape23, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "data");
    CHECK(t == NULL);

    /* nbytes does not match shape x dtype: too few, too many, and right count for another dtype. */
    t = (accel_tensor_t *)&t;
    CHECK_FAILS(accel_tensor_create(data, sizeof data - 4, ACCEL_DTYPE_FLOAT32, shape23, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "nbytes");
    CHECK(t == NULL);
    CHECK_FAILS(accel_tensor_create(data, sizeof data + 4, ACCEL_DTYPE_FLOAT32, shape23, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "nbytes");
    CHECK_FAILS(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT64, shape23, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "nbytes");
    CHECK_FAILS(accel_tensor_create(data, 0, ACCEL_DTYPE_FLOAT32, shape23, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "nbytes");
    /* A scalar needs exactly one element. */
    CHECK_FAILS(accel_tensor_create(data, 8, ACCEL_DTYPE_FLOAT32, NULL, 0, &t), ACCEL_ERR_INVALID_ARGUMENT,
                "nbytes");

    /* Unknown dtypes. */
    CHECK_FAILS(accel_tensor_create(data, sizeof data, 10, shape23, 2, &t), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    CHECK_FAILS(accel_tensor_create(data, sizeof data, -1, shape23, 2, &t), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    CHECK_FAILS(accel_tensor_create(data, sizeof data, 1000, shape23, 2, &t), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    CHECK(t == NULL);

    /* Negative size: the message names the dimension. */
    CHECK_FAILS(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT32, negative, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "shape[1]");
    CHECK(t == NULL);

    /* More than 16 dimensions (16 is fine). */
    CHECK_FAILS(accel_tensor_create(data, 4, ACCEL_DTYPE_FLOAT32, big, 17, &t), ACCEL_ERR_INVALID_ARGUMENT, "ndim");
    CHECK(t == NULL);
    CHECK_OK(accel_tensor_create(data, 4, ACCEL_DTYPE_FLOAT32, big, 16, &t));
    {
        size_t nd = 0;
        CHECK_OK(accel_tensor_get_ndim(t, &nd));
        CHECK(nd == 16);
    }
    accel_tensor_free(t);
    t = NULL;

    /* NULL shape with ndim > 0. */
    CHECK_FAILS(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT32, NULL, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "shape");
    CHECK(t == NULL);

    /* An element count that overflows size_t. */
    {
        const int64_t huge[3] = {INT64_MAX, INT64_MAX, 4};
        CHECK_FAILS(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT32, huge, 3, &t),
                    ACCEL_ERR_INVALID_ARGUMENT, "shape");
        CHECK(t == NULL);
    }
}

static void test_query_bad_inputs(void)
{
    const float data[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape23[2] = {2, 3};
    accel_tensor_t *t = NULL;
    accel_dtype_t dt;
    size_t n;
    int64_t shape[2] = {-7, -7}, numel;
    float back[6];
    double item;

    CHECK_OK(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT32, shape23, 2, &t));

    /* Shape into too little room: OUT_OF_RANGE, nothing written. */
    CHECK_FAILS(accel_tensor_get_shape(t, shape, 1), ACCEL_ERR_OUT_OF_RANGE, "out_len");
    CHECK(shape[0] == -7);
    CHECK_FAILS(accel_tensor_get_shape(t, shape, 0), ACCEL_ERR_OUT_OF_RANGE, "out_len");
    CHECK_FAILS(accel_tensor_get_shape(t, NULL, 2), ACCEL_ERR_INVALID_ARGUMENT, "out");

    /* copy_to_buffer with the wrong size. */
    CHECK_FAILS(accel_tensor_copy_to_buffer(t, back, sizeof back - 1), ACCEL_ERR_INVALID_ARGUMENT, "nbytes");
    CHECK_FAILS(accel_tensor_copy_to_buffer(t, back, sizeof back + 4), ACCEL_ERR_INVALID_ARGUMENT, "nbytes");
    CHECK_FAILS(accel_tensor_copy_to_buffer(t, back, 0), ACCEL_ERR_INVALID_ARGUMENT, "nbytes");
    CHECK_FAILS(accel_tensor_copy_to_buffer(t, NULL, sizeof back), ACCEL_ERR_INVALID_ARGUMENT, "out");

    /* get_item on a multi-element tensor. */
    CHECK_FAILS(accel_tensor_get_item(t, &item), ACCEL_ERR_INVALID_ARGUMENT, "got 6");

    /* NULL out parameters. */
    CHECK_FAILS(accel_tensor_get_dtype(t, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_tensor_get_ndim(t, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_tensor_get_numel(t, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_tensor_get_nbytes(t, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_tensor_to_dlpack(t, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");

    /* NULL tensors. */
    CHECK_FAILS(accel_tensor_get_dtype(NULL, &dt), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    CHECK_FAILS(accel_tensor_get_ndim(NULL, &n), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    CHECK_FAILS(accel_tensor_get_shape(NULL, shape, 2), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    CHECK_FAILS(accel_tensor_get_numel(NULL, &numel), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    CHECK_FAILS(accel_tensor_get_nbytes(NULL, &n), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    CHECK_FAILS(accel_tensor_copy_to_buffer(NULL, back, sizeof back), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
    {
        void *p = NULL;
        CHECK_FAILS(accel_tensor_to_dlpack(NULL, &p), ACCEL_ERR_INVALID_ARGUMENT, "tensor");
        CHECK(p == NULL);
    }

    /* The tensor is unchanged by all of that. */
    CHECK_OK(accel_tensor_copy_to_buffer(t, back, sizeof back));
    CHECK(memcmp(back, data, sizeof data) == 0);
    accel_tensor_free(t);

    /* Frees of NULL are no-ops. */
    accel_tensor_free(NULL);
    accel_model_free(NULL);
    accel_optimizer_free(NULL);
    accel_scheduler_free(NULL);
    accel_dataloader_free(NULL);
    accel_batch_free(NULL);
    accel_accelerator_free(NULL);
    accel_string_free(NULL);
}

static void test_dlpack_roundtrip(void)
{
    const float data[6] = {1.5f, -2.0f, 3.25f, 4.0f, -5.5f, 6.0f};
    const int64_t shape23[2] = {2, 3};
    accel_tensor_t *t = NULL, *back = NULL;
    void *handle = NULL;
    test_DLManagedTensor *m;
    float out[6];
    int64_t shape[2];
    accel_dtype_t dt;

    CHECK_OK(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT32, shape23, 2, &t));
    CHECK_OK(accel_tensor_to_dlpack(t, &handle));
    CHECK(handle != NULL);
    if (handle == NULL) {
        accel_tensor_free(t);
        return;
    }
    m = (test_DLManagedTensor *)handle;
    CHECK(m->dl_tensor.ndim == 2);
    CHECK(m->dl_tensor.shape[0] == 2 && m->dl_tensor.shape[1] == 3);
    CHECK(m->dl_tensor.device.device_type == 1); /* kDLCPU */
    CHECK(m->dl_tensor.dtype.code == 2 && m->dl_tensor.dtype.bits == 32 && m->dl_tensor.dtype.lanes == 1);
    CHECK(m->deleter != NULL);
    /* The memory outlives the tensor handle. */
    accel_tensor_free(t);
    t = NULL;
    CHECK(memcmp((const char *)m->dl_tensor.data + m->dl_tensor.byte_offset, data, sizeof data) == 0);

    /* Import it back: the library owns it now. */
    CHECK_OK(accel_tensor_create_from_dlpack(handle, &back));
    CHECK(back != NULL);
    CHECK_OK(accel_tensor_get_dtype(back, &dt));
    CHECK(dt == ACCEL_DTYPE_FLOAT32);
    CHECK_OK(accel_tensor_get_shape(back, shape, 2));
    CHECK(shape[0] == 2 && shape[1] == 3);
    CHECK_OK(accel_tensor_copy_to_buffer(back, out, sizeof out));
    CHECK(memcmp(out, data, sizeof data) == 0);
    accel_tensor_free(back);

    /* int64 too. */
    {
        const int64_t ldata[3] = {-1, 0, (int64_t)1 << 50};
        const int64_t shape3[1] = {3};
        int64_t lout[3];
        CHECK_OK(accel_tensor_create(ldata, sizeof ldata, ACCEL_DTYPE_INT64, shape3, 1, &t));
        CHECK_OK(accel_tensor_to_dlpack(t, &handle));
        accel_tensor_free(t);
        m = (test_DLManagedTensor *)handle;
        CHECK(m->dl_tensor.dtype.code == 0 && m->dl_tensor.dtype.bits == 64);
        CHECK_OK(accel_tensor_create_from_dlpack(handle, &back));
        CHECK_OK(accel_tensor_copy_to_buffer(back, lout, sizeof lout));
        CHECK(memcmp(lout, ldata, sizeof ldata) == 0);
        accel_tensor_free(back);
    }

    /* A consumer that is not the library calls the deleter itself, exactly once. */
    {
        CHECK_OK(accel_tensor_create(data, sizeof data, ACCEL_DTYPE_FLOAT32, shape23, 2, &t));
        CHECK_OK(accel_tensor_to_dlpack(t, &handle));
        m = (test_DLManagedTensor *)handle;
        accel_tensor_free(t);
        CHECK(((const float *)m->dl_tensor.data)[5] == 6.0f);
        m->deleter(m);
    }
}

/* A DLPack tensor made by the caller: checks the library calls its deleter once, and only on success. */
static int g_deleter_calls = 0;
static void count_deleter(test_DLManagedTensor *self)
{
    (void)self;
    ++g_deleter_calls;
}

static void test_dlpack_from_caller(void)
{
    double buffer[4] = {1.0, 2.0, 3.0, 4.0};
    int64_t shape[2] = {2, 2};
    test_DLManagedTensor m;
    accel_tensor_t *t = (accel_tensor_t *)&t;
    double out[4], item;

    memset(&m, 0, sizeof m);
    m.dl_tensor.data = buffer;
    m.dl_tensor.device.device_type = 1;
    m.dl_tensor.ndim = 2;
    m.dl_tensor.dtype.code = 2;
    m.dl_tensor.dtype.bits = 64;
    m.dl_tensor.dtype.lanes = 1;
    m.dl_tensor.shape = shape;
    m.deleter = count_deleter;

    /* NULL arguments. */
    CHECK_FAILS(accel_tensor_create_from_dlpack(NULL, &t), ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor");
    CHECK(t == NULL);
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");

    /* Invalid descriptions: the caller keeps ownership (no deleter call). */
    shape[1] = -2;
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, &t), ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor");
    shape[1] = 2;
    m.dl_tensor.ndim = -1;
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, &t), ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor");
    m.dl_tensor.ndim = 2;
    m.dl_tensor.data = NULL;
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, &t), ACCEL_ERR_INVALID_ARGUMENT, "managed_tensor");
    m.dl_tensor.data = buffer;
    m.dl_tensor.device.device_type = 7; /* kDLVulkan: neither host nor CUDA memory */
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, &t), ACCEL_ERR_UNIMPLEMENTED, "managed_tensor");
    m.dl_tensor.device.device_type = 1;
    m.dl_tensor.dtype.code = 3; /* opaque handle: no tensor dtype */
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, &t), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    m.dl_tensor.dtype.code = 2;
    m.dl_tensor.dtype.bits = 24;
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, &t), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    m.dl_tensor.dtype.bits = 64;
    m.dl_tensor.dtype.lanes = 4;
    CHECK_FAILS(accel_tensor_create_from_dlpack(&m, &t), ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    m.dl_tensor.dtype.lanes = 1;
    CHECK(t == NULL);
    CHECK(g_deleter_calls == 0);

    /* A valid one: no copy, the deleter runs once when the tensor is freed. */
    CHECK_OK(accel_tensor_create_from_dlpack(&m, &t));
    CHECK(t != NULL);
    CHECK(g_deleter_calls == 0);
    CHECK_OK(accel_tensor_copy_to_buffer(t, out, sizeof out));
    CHECK(memcmp(out, buffer, sizeof buffer) == 0);
    buffer[3] = 40.0; /* shared memory: the tensor sees the change */
    CHECK_OK(accel_tensor_copy_to_buffer(t, out, sizeof out));
    CHECK(out[3] == 40.0);
    CHECK_FAILS(accel_tensor_get_item(t, &item), ACCEL_ERR_INVALID_ARGUMENT, "one element");
    accel_tensor_free(t);
    CHECK(g_deleter_calls == 1);
}

int main(void)
{
    test_every_dtype();
    test_scalars_and_empty();
    test_get_item();
    test_create_bad_inputs();
    test_query_bad_inputs();
    test_dlpack_roundtrip();
    test_dlpack_from_caller();
    return capi_report("test_tensor");
}
