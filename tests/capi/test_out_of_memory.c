/*
 * Out of memory is ACCEL_ERR_RESOURCE_EXHAUSTED (issue 42.4), not an argument error: a forward pass whose hidden
 * activation cannot be allocated, under an address-space limit (as `ulimit -v` sets) so that the failure is the same
 * on every machine whatever its memory. The message says "out of memory" and names the allocation's size; the model
 * still works on a batch that fits afterwards.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "capi_test.h"

#include <dlfcn.h>
#include <sys/resource.h>

/* The address space in use now (VmSize of /proc/self/status), in bytes; 0 when unknown. */
static unsigned long long address_space_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    if (f == NULL) return 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024ULL;
}

static accel_tensor_t *inputs(int64_t rows)
{
    float *x = calloc((size_t)rows * 8, sizeof(float));
    accel_tensor_t *t = NULL;
    int64_t shape[2] = {rows, 8};
    CHECK(x != NULL);
    CHECK_OK(accel_tensor_create(x, (size_t)rows * 8 * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 2, &t));
    free(x);
    return t;
}

int main(void)
{
    /* AddressSanitizer's allocator reports a failed allocation itself and ends the process (its
       allocator_may_return_null=0) instead of returning NULL to LibTorch: nothing to check there. */
    if (dlsym(RTLD_DEFAULT, "__asan_init") != NULL) {
        printf("skipped: under AddressSanitizer an allocation failure ends the process before LibTorch sees it\n");
        return 77;
    }
    accel_model_t *model = NULL;
    accel_tensor_t *small = inputs(4), *big = inputs(1 << 18), *out = NULL;
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [8, 4096, 4]}", &model));
    CHECK_OK(accel_model_forward(model, small, &out));
    accel_tensor_free(out);
    out = NULL;

    /* 1 GiB more address space than now: the hidden activation of 2^18 x 4096 floats (4 GiB) cannot fit. */
    const unsigned long long now = address_space_now();
    CHECK(now > 0);
    struct rlimit limit = {(rlim_t)(now + (1ULL << 30)), (rlim_t)(now + (1ULL << 30))};
    struct rlimit before;
    CHECK(getrlimit(RLIMIT_AS, &before) == 0);
    limit.rlim_max = before.rlim_max;
    CHECK(setrlimit(RLIMIT_AS, &limit) == 0);

    CHECK_FAILS(accel_model_forward(model, big, &out), ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory");
    printf("forward of [262144, 8] under a 1 GiB margin: %s\n", accel_last_error_message());
    CHECK(strstr(accel_last_error_message(), "4294967296 bytes") != NULL); /* the size LibTorch asked for */
    CHECK(strstr(accel_last_error_message(), "[262144, 8]") != NULL);      /* the input's shape */
    CHECK(out == NULL);
    CHECK_FAILS(accel_model_forward_no_grad(model, big, &out), ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory");

    /* Nothing is broken: a batch that fits runs. */
    CHECK_OK(accel_model_forward(model, small, &out));
    accel_tensor_free(out);

    accel_tensor_free(small);
    accel_tensor_free(big);
    accel_model_free(model);
    return capi_report("test_out_of_memory");
}
