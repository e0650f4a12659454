/*
 * accel_find_executable_batch_size (accel/memory.h): a step that runs out of memory above a size lands on the
 * largest size of the sequence that fits, with Accelerate's factors (0.5 up to 1.8, 0.9 from 1.9); a real
 * LibTorch allocation beyond max_memory_bytes is such a failure; other failures end the search with their own
 * status; reaching zero is an error; the options are checked.
 */
#include "capi_test.h"

#define MAX_TRIES 64

typedef struct {
    int64_t fits;               /* the largest batch size the fake step accepts */
    accel_status_t too_large;   /* what it returns above that */
    const char *message;        /* and the message it sets */
    int64_t fail_at;            /* a batch size at which it fails with fail_status (0: never) */
    accel_status_t fail_status;
    int64_t tried[MAX_TRIES];
    int n;
} fake_step_t;

static accel_status_t fake_step(void *user_data, int64_t batch_size)
{
    fake_step_t *s = (fake_step_t *)user_data;
    if (s->n < MAX_TRIES) s->tried[s->n++] = batch_size;
    if (batch_size == s->fail_at) {
        accel_callback_set_error("the data set is gone");
        return s->fail_status;
    }
    if (batch_size > s->fits) {
        accel_callback_set_error(s->message);
        return s->too_large;
    }
    return ACCEL_OK;
}

static int same_tries(const fake_step_t *s, const int64_t *expected, int n)
{
    int i;
    if (s->n != n) return 0;
    for (i = 0; i < n; ++i)
        if (s->tried[i] != expected[i]) return 0;
    return 1;
}

static void test_halving_lands_on_largest_that_fits(void)
{
    fake_step_t s = {37, ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory (an allocation of 8 bytes failed)", 0, 0, {0}, 0};
    const int64_t expected[] = {128, 64, 32};
    int64_t found = -1;
    CHECK_OK(accel_find_executable_batch_size(128, NULL, fake_step, &s, &found));
    CHECK(found == 32);
    CHECK(same_tries(&s, expected, 3));
}

static void test_factor_09(void)
{
    /* Accelerate 1.9+: batch_size = int(batch_size * 0.9), computed by hand from 128. */
    fake_step_t s = {37, ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory", 0, 0, {0}, 0};
    const int64_t expected[] = {128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36};
    int64_t found = -1;
    CHECK_OK(accel_find_executable_batch_size(128, "{\"reduce_batch_size_factor\": 0.9}", fake_step, &s, &found));
    CHECK(found == 36);
    CHECK(same_tries(&s, expected, 12));
}

static void test_out_of_memory_by_message(void)
{
    /* A binding's exception that is not accel's (PyTorch's CUDA OOM in a Python step): its text says it. */
    fake_step_t s = {10, ACCEL_ERR_UNKNOWN, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", 0, 0, {0}, 0};
    int64_t found = -1;
    CHECK_OK(accel_find_executable_batch_size(40, NULL, fake_step, &s, &found));
    CHECK(found == 10);
    CHECK(s.n == 3);
}

static void test_other_errors_propagate(void)
{
    fake_step_t s = {16, ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory", 32, ACCEL_ERR_NOT_FOUND, {0}, 0};
    const int64_t expected[] = {64, 32};
    int64_t found = -1;
    CHECK_FAILS(accel_find_executable_batch_size(64, NULL, fake_step, &s, &found), ACCEL_ERR_NOT_FOUND,
                "the step failed with batch size 32: the data set is gone");
    CHECK(found == 0);
    CHECK(same_tries(&s, expected, 2));

    /* Not out of memory by status nor by text: no retry. */
    s.n = 0;
    s.fail_at = 0;
    s.too_large = ACCEL_ERR_INVALID_ARGUMENT;
    s.message = "labels: shape [3] does not match";
    CHECK_FAILS(accel_find_executable_batch_size(64, NULL, fake_step, &s, &found), ACCEL_ERR_INVALID_ARGUMENT,
                "batch size 64: labels: shape [3]");
    CHECK(s.n == 1);
}

static void test_reached_zero(void)
{
    fake_step_t s = {0, ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory: always", 0, 0, {0}, 0};
    const int64_t expected[] = {8, 4, 2, 1};
    int64_t found = -1;
    CHECK_FAILS(accel_find_executable_batch_size(8, NULL, fake_step, &s, &found), ACCEL_ERR_RESOURCE_EXHAUSTED,
                "no executable batch size found, reached zero");
    CHECK(strstr(accel_last_error_message(), "batch size 1 ran out of memory: out of memory: always") != NULL);
    CHECK(found == 0);
    CHECK(same_tries(&s, expected, 4));
}

static void test_arguments(void)
{
    fake_step_t s = {8, ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory", 0, 0, {0}, 0};
    int64_t found = 0;
    CHECK_FAILS(accel_find_executable_batch_size(0, NULL, fake_step, &s, &found), ACCEL_ERR_INVALID_ARGUMENT,
                "starting_batch_size");
    CHECK_FAILS(accel_find_executable_batch_size(8, NULL, NULL, &s, &found), ACCEL_ERR_INVALID_ARGUMENT, "step");
    CHECK_FAILS(accel_find_executable_batch_size(8, NULL, fake_step, &s, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_find_executable_batch_size(8, "{\"reduce_batch_size_factor\": 1}", fake_step, &s, &found),
                ACCEL_ERR_INVALID_ARGUMENT, "reduce_batch_size_factor");
    CHECK_FAILS(accel_find_executable_batch_size(8, "{\"reduce_batch_size_factor\": 0}", fake_step, &s, &found),
                ACCEL_ERR_INVALID_ARGUMENT, "reduce_batch_size_factor");
    CHECK_FAILS(accel_find_executable_batch_size(8, "{\"max_memory_bytes\": \"lots\"}", fake_step, &s, &found),
                ACCEL_ERR_INVALID_ARGUMENT, "max_memory_bytes");
    CHECK_FAILS(accel_find_executable_batch_size(8, "{\"max_memory_bytes\": 0}", fake_step, &s, &found),
                ACCEL_ERR_INVALID_ARGUMENT, "max_memory_bytes");
    CHECK_FAILS(accel_find_executable_batch_size(8, "{\"starting_batch_size\": 8}", fake_step, &s, &found),
                ACCEL_ERR_INVALID_ARGUMENT, "starting_batch_size");
    CHECK(s.n == 0); /* none of these ran the step */
}

/* A real step: a forward pass of an MLP over batch_size rows, under a 4 MB budget. */
typedef struct {
    accel_model_t *model;
    int64_t tried[MAX_TRIES];
    accel_status_t status[MAX_TRIES];
    int n;
} forward_step_t;

#define WIDTH 256

static accel_status_t forward_step(void *user_data, int64_t batch_size)
{
    forward_step_t *s = (forward_step_t *)user_data;
    float *x = calloc((size_t)batch_size * WIDTH, sizeof(float));
    accel_tensor_t *in = NULL, *out = NULL;
    int64_t shape[2];
    accel_status_t st;
    shape[0] = batch_size;
    shape[1] = WIDTH;
    if (x == NULL) return ACCEL_ERR_RESOURCE_EXHAUSTED;
    st = accel_tensor_create(x, (size_t)batch_size * WIDTH * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 2, &in);
    free(x);
    if (st == ACCEL_OK) st = accel_model_forward(s->model, in, &out);
    if (s->n < MAX_TRIES) {
        s->tried[s->n] = batch_size;
        s->status[s->n++] = st;
    }
    accel_tensor_free(out);
    accel_tensor_free(in);
    return st; /* the failed call's message is the step's */
}

static accel_status_t nested_step(void *user_data, int64_t batch_size)
{
    int64_t found = 0;
    (void)batch_size;
    return accel_find_executable_batch_size(4, "{\"max_memory_bytes\": 1000000}", forward_step, user_data, &found);
}

static void test_budget_with_libtorch(void)
{
    forward_step_t s;
    int64_t found = 0;
    int i;
    memset(&s, 0, sizeof s);
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [256, 1024, 4]}", &s.model));
    /* One row: 1 KiB of inputs and 4 KiB of hidden activation (twice: before and after the activation), so the
       budget of 4 MB fits somewhat fewer than 400 rows; 1024 and 512 cannot fit. */
    CHECK_OK(accel_find_executable_batch_size(1024, "{\"max_memory_bytes\": \"4MB\"}", forward_step, &s, &found));
    printf("budget 4MB: tried");
    for (i = 0; i < s.n; ++i) printf(" %lld (%s)", (long long)s.tried[i], accel_status_name(s.status[i]));
    printf(", found %lld\n", (long long)found);
    CHECK(found == 256);
    CHECK(s.n == 3);
    CHECK(s.status[0] == ACCEL_ERR_RESOURCE_EXHAUSTED && s.status[1] == ACCEL_ERR_RESOURCE_EXHAUSTED);
    CHECK(s.status[s.n - 1] == ACCEL_OK);

    /* The budget ended with the search: a forward far above it runs. */
    s.n = 0;
    CHECK(forward_step(&s, 4096) == ACCEL_OK);

    /* One budget at a time (it counts the whole process's allocations). */
    CHECK_FAILS(accel_find_executable_batch_size(2, "{\"max_memory_bytes\": 1000000}", nested_step, &s, &found),
                ACCEL_ERR_FAILED_PRECONDITION, "already running");
    accel_model_free(s.model);
}

/* The guide's step (docs/guides/big-models.md): free_memory, a loader of batch_size, prepare, one epoch. */
typedef struct {
    accel_accelerator_t *acc;
    accel_model_t *model;
    accel_optimizer_t *opt;
    accel_tensor_t *x, *y;
    int64_t tried[MAX_TRIES];
    int n;
} job_t;

static accel_status_t train(void *user_data, int64_t batch_size)
{
    job_t *job = user_data;
    char config[64];
    accel_dataloader_t *dl = NULL;
    accel_batch_t *batch = NULL;
    double loss = 0;
    accel_status_t st = accel_accelerator_free_memory(job->acc); /* what the last try prepared */
    if (job->n < MAX_TRIES) job->tried[job->n++] = batch_size;
    snprintf(config, sizeof config, "{\"batch_size\": %lld}", (long long)batch_size);
    if (st == ACCEL_OK) st = accel_dataloader_create_from_tensors(job->x, job->y, config, &dl);
    if (st == ACCEL_OK) st = accel_accelerator_prepare(job->acc, job->model, job->opt, dl, NULL);
    while (st == ACCEL_OK && (st = accel_dataloader_next(dl, &batch)) == ACCEL_OK && batch != NULL) {
        st = accel_accelerator_train_step(job->acc, job->model, job->opt, NULL, batch, "cross_entropy", &loss);
        accel_batch_free(batch);
    }
    accel_dataloader_free(dl);
    return st; /* RESOURCE_EXHAUSTED: tried again with a smaller batch size */
}

static void test_guide_training_step(void)
{
    job_t job;
    const int64_t rows = 512;
    float *x = calloc((size_t)rows * WIDTH, sizeof(float));
    int64_t *y = calloc((size_t)rows, sizeof(int64_t));
    int64_t xs[2] = {rows, WIDTH}, ys[1] = {rows}, found = 0;
    int i;
    memset(&job, 0, sizeof job);
    CHECK(x != NULL && y != NULL);
    for (i = 0; i < rows * WIDTH; ++i) x[i] = (float)(i % 7) / 7.0f;
    for (i = 0; i < rows; ++i) y[i] = i % 4;
    CHECK_OK(accel_tensor_create(x, (size_t)rows * WIDTH * sizeof(float), ACCEL_DTYPE_FLOAT32, xs, 2, &job.x));
    CHECK_OK(accel_tensor_create(y, (size_t)rows * sizeof(int64_t), ACCEL_DTYPE_INT64, ys, 1, &job.y));
    /* "cpu": max_memory_bytes budgets LibTorch's CPU allocator, so the model must train there. */
    CHECK_OK(accel_accelerator_create("{\"cpu\": true}", &job.acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [256, 1024, 4]}", &job.model));
    CHECK_OK(accel_optimizer_create(job.model, "{\"type\": \"sgd\", \"lr\": 0.01}", &job.opt));
    CHECK_OK(accel_find_executable_batch_size(512, "{\"max_memory_bytes\": \"4MB\"}", train, &job, &found));
    printf("training under 4MB: tried");
    for (i = 0; i < job.n; ++i) printf(" %lld", (long long)job.tried[i]);
    printf(", found %lld\n", (long long)found);
    CHECK(job.n >= 2);               /* 512 rows at once cannot train in 4 MB ... */
    CHECK(found == job.tried[job.n - 1] && found < 512 && found >= 1);
    CHECK(job.tried[job.n - 2] == 2 * found); /* ... and the size above the one found failed */
    accel_optimizer_free(job.opt);
    accel_model_free(job.model);
    accel_accelerator_free(job.acc);
    accel_tensor_free(job.x);
    accel_tensor_free(job.y);
    free(x);
    free(y);
}

int main(void)
{
    test_halving_lands_on_largest_that_fits();
    test_factor_09();
    test_out_of_memory_by_message();
    test_other_errors_propagate();
    test_reached_zero();
    test_arguments();
    test_budget_with_libtorch();
    test_guide_training_step();
    return capi_report("test_memory");
}
