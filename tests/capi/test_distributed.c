/* The distributed part of the C API in a single process: collectives return their input, process facts,
 * batch indices, argument checking, and the ddp / init_process_group configuration keys. */
#include "capi_test.h"

#include <accel/accel.h>

#include <string.h>

static accel_tensor_t *f32(const float *v, int64_t n)
{
    accel_tensor_t *t = NULL;
    int64_t shape[1] = {n};
    CHECK_OK(accel_tensor_create(v, (size_t)n * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 1, &t));
    return t;
}

static void expect_values(const accel_tensor_t *t, const float *v, int64_t n)
{
    float buf[16];
    int64_t m = 0;
    CHECK_OK(accel_tensor_get_numel(t, &m));
    CHECK(m == n);
    CHECK_OK(accel_tensor_copy_to_buffer(t, buf, (size_t)n * sizeof(float)));
    for (int64_t i = 0; i < n; ++i) CHECK(buf[i] == v[i]);
}

static void expect_create_fails(const char *config, accel_status_t code, const char *needle)
{
    accel_accelerator_t *acc = NULL;
    accel_status_t st = accel_accelerator_create(config, &acc);
    if (st != code || acc != NULL || strstr(accel_last_error_message(), needle) == NULL) {
        fprintf(stderr, "config %s: got %s: %s (expected %s with \"%s\")\n", config, accel_status_name(st),
                accel_last_error_message(), accel_status_name(code), needle);
        ++capi_failures;
    }
}

/* Backend "nccl" in one process. Not compiled in: UNIMPLEMENTED saying so. Compiled in: UNAVAILABLE
 * "no CUDA device" on a machine without a GPU (this build machine), UNIMPLEMENTED naming the library
 * where the CUDA runtime or NCCL is not installed, and a working accelerator where a GPU exists. */
static void check_nccl_backend(void)
{
    const char *config = "{\"kwargs_handlers\": {\"init_process_group\": {\"backend\": \"nccl\"}}}";
    char *info = NULL;
    CHECK_OK(accel_build_info_json(&info));
    const char *backends = info ? strstr(info, "\"backends\"") : NULL;
    const char *end = backends ? strchr(backends, ']') : NULL;
    const char *nccl = backends ? strstr(backends, "\"nccl\"") : NULL;
    int compiled = nccl != NULL && end != NULL && nccl < end;
    accel_string_free(info);
    if (!compiled) {
        expect_create_fails(config, ACCEL_ERR_UNIMPLEMENTED, "\"nccl\" was not compiled into this accel");
        return;
    }
    accel_accelerator_t *acc = NULL;
    accel_status_t st = accel_accelerator_create(config, &acc);
    const char *msg = accel_last_error_message();
    if (st == ACCEL_OK) { /* a machine with a CUDA device (never run so far) */
        const char *backend = NULL;
        CHECK_OK(accel_accelerator_get_distributed_backend(acc, &backend));
        CHECK(backend != NULL && strcmp(backend, "nccl") == 0);
        accel_accelerator_free(acc);
    } else if (st == ACCEL_ERR_UNAVAILABLE) {
        CHECK(acc == NULL);
        CHECK(strstr(msg, "no CUDA device: cudaGetDeviceCount returned ") != NULL);
    } else {
        CHECK(st == ACCEL_ERR_UNIMPLEMENTED);
        CHECK(strstr(msg, "libcudart") != NULL || strstr(msg, "libnccl") != NULL);
    }
    if (st != ACCEL_OK) printf("test_distributed: backend nccl: %s: %s\n", accel_status_name(st), msg);
}

int main(int argc, char **argv)
{
    /* ctest capi_test_distributed_nccl: its own process, since a process has one distributed
     * configuration and the checks below create "single" accelerators first. */
    if (argc > 1 && strcmp(argv[1], "nccl") == 0) {
        check_nccl_backend();
        return capi_report("test_distributed nccl");
    }
    accel_accelerator_t *acc = NULL;
    CHECK_OK(accel_accelerator_create("{\"kwargs_handlers\": {\"ddp\": {\"bucket_cap_mb\": 5, \"comm_hook\": \"fp16\","
                                      " \"find_unused_parameters\": true}, \"init_process_group\": {\"backend\": \"gloo\","
                                      " \"timeout\": 60}}}",
                                      &acc));
    const char *backend = NULL;
    CHECK_OK(accel_accelerator_get_distributed_backend(acc, &backend));
    CHECK(strcmp(backend, "single") == 0);
    char *json = NULL;
    CHECK_OK(accel_accelerator_get_config_json(acc, &json));
    CHECK(strstr(json, "\"bucket_cap_mb\":5") != NULL || strstr(json, "\"bucket_cap_mb\": 5") != NULL);
    CHECK(strstr(json, "fp16") != NULL);
    accel_string_free(json);

    float v[3] = {1, 2, 3};
    accel_tensor_t *t = f32(v, 3), *out = NULL;
    CHECK_OK(accel_accelerator_gather(acc, t, &out));
    expect_values(out, v, 3);
    accel_tensor_free(out);
    CHECK_OK(accel_accelerator_gather_for_metrics(acc, t, &out));
    expect_values(out, v, 3);
    accel_tensor_free(out);
    const char *reductions[5] = {"sum", "mean", "max", "min", "none"};
    for (int i = 0; i < 5; ++i) {
        CHECK_OK(accel_accelerator_reduce(acc, t, reductions[i], &out));
        expect_values(out, v, 3);
        accel_tensor_free(out);
    }
    CHECK_FAILS(accel_accelerator_reduce(acc, t, "product", &out), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK(out == NULL);
    CHECK_FAILS(accel_accelerator_reduce(acc, t, NULL, &out), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK_FAILS(accel_accelerator_reduce(acc, NULL, "sum", &out), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK_FAILS(accel_accelerator_reduce(acc, t, "sum", NULL), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK_FAILS(accel_accelerator_gather(NULL, t, &out), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK_OK(accel_accelerator_broadcast(acc, t, 0));
    expect_values(t, v, 3);
    CHECK_FAILS(accel_accelerator_broadcast(acc, t, 1), ACCEL_ERR_OUT_OF_RANGE, "");
    CHECK_FAILS(accel_accelerator_broadcast(acc, t, -1), ACCEL_ERR_OUT_OF_RANGE, "");
    CHECK_OK(accel_accelerator_pad_across_processes(acc, t, 0, 0.0, true, &out));
    expect_values(out, v, 3);
    accel_tensor_free(out);
    CHECK_OK(accel_accelerator_split_between_processes(acc, t, true, &out));
    expect_values(out, v, 3);
    accel_tensor_free(out);
    CHECK_OK(accel_accelerator_wait_for_everyone(acc));
    {
        bool fired = true;
        CHECK_OK(accel_accelerator_check_trigger(acc, &fired));
        CHECK(!fired);
        CHECK_OK(accel_accelerator_set_trigger(acc));
        CHECK_OK(accel_accelerator_set_trigger(acc));
        CHECK_OK(accel_accelerator_check_trigger(acc, &fired));
        CHECK(fired);
        CHECK_OK(accel_accelerator_check_trigger(acc, &fired));
        CHECK(!fired);
        CHECK_FAILS(accel_accelerator_check_trigger(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_accelerator_check_trigger(NULL, &fired), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
        CHECK_FAILS(accel_accelerator_set_trigger(NULL), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    }
    CHECK_FAILS(accel_accelerator_main_process_first_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "");
    CHECK_OK(accel_accelerator_main_process_first_begin(acc));
    CHECK_OK(accel_accelerator_local_main_process_first_begin(acc));
    CHECK_OK(accel_accelerator_local_main_process_first_end(acc));
    CHECK_OK(accel_accelerator_main_process_first_end(acc));

    int32_t n = 0, idx = -1;
    bool flag = false;
    CHECK_OK(accel_accelerator_get_num_local_processes(acc, &n));
    CHECK(n == 1);
    CHECK_OK(accel_accelerator_is_last_process(acc, &flag));
    CHECK(flag);
    CHECK_OK(accel_process_get_local_index(&idx));
    CHECK(idx == 0);
    CHECK_OK(accel_process_get_local_count(&n));
    CHECK(n == 1);
    CHECK_OK(accel_process_is_local_main(&flag));
    CHECK(flag);
    CHECK_FAILS(accel_process_get_local_index(NULL), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK_OK(accel_accelerator_get_ddp_stats_json(acc, &json));
    CHECK(strstr(json, "\"models\": []") != NULL);
    accel_string_free(json);
    /* the device mesh of a world of one: every dimension 1, every rank 0 (Accelerate's names) */
    CHECK_OK(accel_accelerator_get_parallel_ranks_json(acc, &json));
    CHECK(strstr(json, "\"world_size\": 1, \"rank\": 0") != NULL);
    CHECK(strstr(json, "\"data_parallel_rank\": 0, \"data_parallel_size\": 1") != NULL);
    CHECK(strstr(json, "\"tensor_parallel_rank\": 0, \"tensor_parallel_size\": 1") != NULL);
    CHECK(strstr(json, "\"pipeline_parallel_rank\": 0, \"pipeline_parallel_size\": 1") != NULL);
    CHECK(strstr(json, "\"dp_shard_cp\": {\"size\": 1, \"rank\": 0}") != NULL);
    accel_string_free(json);
    CHECK_FAILS(accel_accelerator_get_parallel_ranks_json(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_accelerator_get_parallel_ranks_json(NULL, &json), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    {
        /* parallelism_config through the C API: the data dimensions accepted, a mesh larger than the job named */
        accel_accelerator_t *other = NULL;
        CHECK_OK(accel_accelerator_create("{\"parallelism_config\": {\"dp_replicate_size\": 1}}", &other));
        accel_accelerator_free(other);
        other = NULL;
        CHECK_FAILS(accel_accelerator_create("{\"parallelism_config\": {\"cp_size\": 2}}", &other), ACCEL_ERR_INVALID_ARGUMENT,
                    "= 2 processes, but the job has 1");
        CHECK(other == NULL);
    }

    /* batch indices: shuffled with a seed, every sample once per pass */
    float x[10];
    for (int i = 0; i < 10; ++i) x[i] = (float)i;
    accel_tensor_t *features = f32(x, 10);
    accel_dataloader_t *dl = NULL;
    CHECK_OK(accel_dataloader_create_from_tensors(features, NULL, "{\"batch_size\": 4, \"shuffle\": true, \"seed\": 3}", &dl));
    CHECK_OK(accel_accelerator_prepare(acc, NULL, NULL, dl, NULL));
    int seen[10] = {0};
    accel_batch_t *b = NULL;
    while (accel_dataloader_next(dl, &b) == ACCEL_OK && b != NULL) {
        accel_tensor_t *ind = NULL, *in = NULL;
        int64_t k = 0, ibuf[4];
        float fbuf[4];
        CHECK_OK(accel_batch_get_indices(b, &ind));
        CHECK_OK(accel_batch_get_inputs(b, &in));
        CHECK_OK(accel_tensor_get_numel(ind, &k));
        CHECK_OK(accel_tensor_copy_to_buffer(ind, ibuf, (size_t)k * sizeof(int64_t)));
        CHECK_OK(accel_tensor_copy_to_buffer(in, fbuf, (size_t)k * sizeof(float)));
        for (int64_t i = 0; i < k; ++i) {
            CHECK(fbuf[i] == (float)ibuf[i]);
            seen[ibuf[i]]++;
        }
        accel_tensor_free(ind);
        accel_tensor_free(in);
        accel_batch_free(b);
    }
    for (int i = 0; i < 10; ++i) CHECK(seen[i] == 1);
    /* Its own out variable: a failing call clears *out, and passing &t lost (leaked) t. */
    accel_tensor_t *none = NULL;
    CHECK_FAILS(accel_batch_get_indices(NULL, &none), ACCEL_ERR_INVALID_ARGUMENT, "");
    CHECK(none == NULL);
    accel_dataloader_free(dl);
    accel_tensor_free(features);
    accel_tensor_free(t);
    accel_accelerator_free(acc);

    expect_create_fails("{\"kwargs_handlers\": {\"ddp\": {\"bucket_cap_mb\": \"25MB\"}}}", ACCEL_ERR_INVALID_ARGUMENT,
                        "kwargs_handlers.ddp.bucket_cap_mb");
    expect_create_fails("{\"kwargs_handlers\": {\"ddp\": {\"comm_hook\": \"power_sgd\"}}}", ACCEL_ERR_UNIMPLEMENTED,
                        "kwargs_handlers.ddp.comm_hook");
    expect_create_fails("{\"kwargs_handlers\": {\"ddp\": {\"bucket_size\": 3}}}", ACCEL_ERR_INVALID_ARGUMENT,
                        "kwargs_handlers.ddp.bucket_size");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"backend\": \"tcp\"}}}",
                        ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.backend");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"timeout\": 0}}}", ACCEL_ERR_INVALID_ARGUMENT,
                        "kwargs_handlers.init_process_group.timeout");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"init_method\": \"udp://x\"}}}",
                        ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.init_method");
    /* rank and world_size: both or neither, rank below world_size, local keys only with them (issue 43.10) */
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"rank\": 0}}}", ACCEL_ERR_INVALID_ARGUMENT,
                        "kwargs_handlers.init_process_group.world_size: needed with");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"world_size\": 2}}}", ACCEL_ERR_INVALID_ARGUMENT,
                        "kwargs_handlers.init_process_group.rank: needed with");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"rank\": 2, \"world_size\": 2}}}",
                        ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.rank: 2 is not below world_size 2");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"rank\": -1, \"world_size\": 2}}}",
                        ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.rank");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"local_rank\": 1}}}",
                        ACCEL_ERR_INVALID_ARGUMENT, "local_rank: only with rank and world_size");
    expect_create_fails("{\"kwargs_handlers\": {\"init_process_group\": {\"rank\": 0, \"world_size\": 2, "
                        "\"local_rank\": 1, \"local_world_size\": 1}}}",
                        ACCEL_ERR_INVALID_ARGUMENT, "local_rank: 1 is not below local_world_size 1");
    {
        /* A world of one told so explicitly: a plain single process. */
        accel_accelerator_t *one = NULL;
        int32_t n = 0;
        CHECK_OK(accel_accelerator_create("{\"kwargs_handlers\": {\"init_process_group\": {\"rank\": 0, \"world_size\": 1}}}",
                                          &one));
        CHECK_OK(accel_accelerator_get_num_processes(one, &n));
        CHECK(n == 1);
        accel_accelerator_free(one);
    }
    return capi_report("test_distributed");
}
