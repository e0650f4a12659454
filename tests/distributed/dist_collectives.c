/*
 * dist_collectives EXPECTED_BACKEND MARKER_FILE ['<accelerator config JSON>']
 *
 * Every collective of the C API against results computed by hand for P processes, rank r.
 */
#include "dist_common.h"

#include <string.h>
#include <unistd.h>

static void read_f32(const accel_tensor_t *t, float *buf, int64_t expect_n)
{
    int64_t n = dist_numel(t);
    DIST_EXPECT(n == expect_n, "expected %lld elements, got %lld", (long long)expect_n, (long long)n);
    DIST_CHECK(accel_tensor_copy_to_buffer(t, buf, (size_t)n * sizeof(float)));
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dist_collectives BACKEND MARKER [CONFIG]\n");
        return 2;
    }
    accel_accelerator_t *acc = NULL;
    DIST_CHECK(accel_accelerator_create(argc > 3 ? argv[3] : NULL, &acc));
    int32_t r = 0, p = 0, lr = 0, lp = 0, env_r = -1, env_p = -1, env_lr = -1, env_lp = -1;
    bool is_main = false, is_local_main = false, is_last = false, env_main = false, env_local_main = false;
    DIST_CHECK(accel_accelerator_get_process_index(acc, &r));
    DIST_CHECK(accel_accelerator_get_num_processes(acc, &p));
    DIST_CHECK(accel_accelerator_get_local_process_index(acc, &lr));
    DIST_CHECK(accel_accelerator_get_num_local_processes(acc, &lp));
    DIST_CHECK(accel_accelerator_is_main_process(acc, &is_main));
    DIST_CHECK(accel_accelerator_is_local_main_process(acc, &is_local_main));
    DIST_CHECK(accel_accelerator_is_last_process(acc, &is_last));
    DIST_CHECK(accel_process_get_index(&env_r));
    DIST_CHECK(accel_process_get_count(&env_p));
    DIST_CHECK(accel_process_get_local_index(&env_lr));
    DIST_CHECK(accel_process_get_local_count(&env_lp));
    DIST_CHECK(accel_process_is_main(&env_main));
    DIST_CHECK(accel_process_is_local_main(&env_local_main));
    DIST_EXPECT(p >= 2, "expected several processes, got %d", p);
    DIST_EXPECT(env_r == r && env_p == p && env_lr == lr && env_lp == lp, "process facts differ");
    DIST_EXPECT(is_main == (r == 0) && env_main == is_main, "is_main");
    DIST_EXPECT(is_local_main == (lr == 0) && env_local_main == is_local_main, "is_local_main");
    DIST_EXPECT(is_last == (r == p - 1), "is_last");
    const char *backend = NULL;
    DIST_CHECK(accel_accelerator_get_distributed_backend(acc, &backend));
    DIST_EXPECT(strcmp(backend, argv[1]) == 0, "backend %s, expected %s", backend, argv[1]);

    float buf[64];
    /* gather: rank r holds [2r, 2r+1] -> [0, 1, ..., 2P-1]. */
    {
        float mine[2] = {(float)(2 * r), (float)(2 * r + 1)};
        accel_tensor_t *t = dist_tensor_f32(mine, 2), *g = NULL;
        DIST_CHECK(accel_accelerator_gather(acc, t, &g));
        read_f32(g, buf, 2 * p);
        for (int i = 0; i < 2 * p; ++i) DIST_EXPECT(buf[i] == (float)i, "gather[%d] = %g", i, buf[i]);
        accel_tensor_free(g);
        /* reduce (Accelerate's example): arange(2) + 1 + 2r; sum over r of (1 + 2r, 2 + 2r). */
        float a[2] = {(float)(1 + 2 * r), (float)(2 + 2 * r)};
        accel_tensor_t *ta = dist_tensor_f32(a, 2), *red = NULL;
        float s0 = 0, s1 = 0;
        for (int k = 0; k < p; ++k) {
            s0 += (float)(1 + 2 * k);
            s1 += (float)(2 + 2 * k);
        }
        DIST_CHECK(accel_accelerator_reduce(acc, ta, "sum", &red));
        read_f32(red, buf, 2);
        DIST_EXPECT(buf[0] == s0 && buf[1] == s1, "reduce sum = [%g, %g], expected [%g, %g]", buf[0], buf[1], s0, s1);
        accel_tensor_free(red);
        if (p == 2) DIST_EXPECT(buf[0] == 4.0f && buf[1] == 6.0f, "Accelerate's example: [4, 6]");
        DIST_CHECK(accel_accelerator_reduce(acc, ta, "mean", &red));
        read_f32(red, buf, 2);
        DIST_EXPECT(buf[0] == s0 / (float)p && buf[1] == s1 / (float)p, "reduce mean = [%g, %g]", buf[0], buf[1]);
        accel_tensor_free(red);
        DIST_CHECK(accel_accelerator_reduce(acc, ta, "max", &red));
        read_f32(red, buf, 2);
        DIST_EXPECT(buf[0] == (float)(1 + 2 * (p - 1)), "reduce max = %g", buf[0]);
        accel_tensor_free(red);
        DIST_CHECK(accel_accelerator_reduce(acc, ta, "min", &red));
        read_f32(red, buf, 2);
        DIST_EXPECT(buf[0] == 1.0f && buf[1] == 2.0f, "reduce min = [%g, %g]", buf[0], buf[1]);
        accel_tensor_free(red);
        DIST_EXPECT(accel_accelerator_reduce(acc, ta, "avg", &red) == ACCEL_ERR_INVALID_ARGUMENT, "bad reduction");
        /* input unchanged */
        read_f32(ta, buf, 2);
        DIST_EXPECT(buf[0] == a[0], "reduce changed its input");
        accel_tensor_free(ta);
        accel_tensor_free(t);
    }
    /* broadcast from the last rank, in place. */
    {
        float mine[3] = {(float)r, (float)(10 * r), -1.0f};
        accel_tensor_t *t = dist_tensor_f32(mine, 3);
        DIST_CHECK(accel_accelerator_broadcast(acc, t, p - 1));
        read_f32(t, buf, 3);
        DIST_EXPECT(buf[0] == (float)(p - 1) && buf[1] == (float)(10 * (p - 1)) && buf[2] == -1.0f,
                    "broadcast = [%g, %g, %g]", buf[0], buf[1], buf[2]);
        DIST_EXPECT(accel_accelerator_broadcast(acc, t, p) == ACCEL_ERR_OUT_OF_RANGE, "broadcast from rank P");
        accel_tensor_free(t);
    }
    /* pad_across_processes: rank r holds r + 1 fives -> length P, padding 0 after (or before). */
    {
        float mine[64];
        for (int i = 0; i <= r; ++i) mine[i] = 5.0f;
        accel_tensor_t *t = dist_tensor_f32(mine, r + 1), *padded = NULL;
        DIST_CHECK(accel_accelerator_pad_across_processes(acc, t, 0, 0.0, false, &padded));
        read_f32(padded, buf, p);
        for (int i = 0; i < p; ++i) DIST_EXPECT(buf[i] == (i <= r ? 5.0f : 0.0f), "pad[%d] = %g", i, buf[i]);
        accel_tensor_free(padded);
        DIST_CHECK(accel_accelerator_pad_across_processes(acc, t, -1, 7.0, true, &padded));
        read_f32(padded, buf, p);
        for (int i = 0; i < p; ++i)
            DIST_EXPECT(buf[i] == (i >= p - 1 - r ? 5.0f : 7.0f), "pad_first[%d] = %g", i, buf[i]);
        accel_tensor_free(padded);
        accel_tensor_free(t);
    }
    /* split_between_processes: 7 rows -> q = 7 / P, the first 7 % P ranks one more. */
    {
        float rows[7] = {0, 1, 2, 3, 4, 5, 6};
        accel_tensor_t *t = dist_tensor_f32(rows, 7), *part = NULL;
        int q = 7 / p, extra = 7 % p;
        int start = r * q + (r < extra ? r : extra), len = q + (r < extra ? 1 : 0);
        DIST_CHECK(accel_accelerator_split_between_processes(acc, t, false, &part));
        read_f32(part, buf, len);
        for (int i = 0; i < len; ++i) DIST_EXPECT(buf[i] == (float)(start + i), "split[%d] = %g", i, buf[i]);
        accel_tensor_free(part);
        DIST_CHECK(accel_accelerator_split_between_processes(acc, t, true, &part));
        int padded_len = q + (extra > 0 ? 1 : 0);
        read_f32(part, buf, padded_len);
        for (int i = 0; i < padded_len; ++i)
            DIST_EXPECT(buf[i] == (i < len ? (float)(start + i) : 6.0f), "split padded[%d] = %g", i, buf[i]);
        accel_tensor_free(part);
        accel_tensor_free(t);
    }
    /* main_process_first: the main process creates the marker; the others find it in their block. */
    {
        if (r == 0) unlink(argv[2]);
        DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
        DIST_CHECK(accel_accelerator_main_process_first_begin(acc));
        if (r == 0) {
            usleep(200000);
            FILE *f = fopen(argv[2], "w");
            DIST_EXPECT(f != NULL, "cannot create %s", argv[2]);
            fclose(f);
        } else {
            DIST_EXPECT(access(argv[2], F_OK) == 0, "rank %d entered main_process_first before the main process left", r);
        }
        DIST_CHECK(accel_accelerator_main_process_first_end(acc));
        DIST_EXPECT(accel_accelerator_main_process_first_end(acc) == ACCEL_ERR_FAILED_PRECONDITION, "unpaired end");
        DIST_CHECK(accel_accelerator_local_main_process_first_begin(acc));
        DIST_CHECK(accel_accelerator_local_main_process_first_end(acc));
        DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
    }
    /* gather of a 0-d tensor, int64. */
    {
        int64_t v = 100 + r, out[64];
        accel_tensor_t *t = NULL, *g = NULL;
        DIST_CHECK(accel_tensor_create(&v, sizeof v, ACCEL_DTYPE_INT64, NULL, 0, &t));
        DIST_CHECK(accel_accelerator_gather(acc, t, &g));
        DIST_EXPECT(dist_numel(g) == p, "0-d gather has %lld elements", (long long)dist_numel(g));
        DIST_CHECK(accel_tensor_copy_to_buffer(g, out, (size_t)p * sizeof(int64_t)));
        for (int i = 0; i < p; ++i) DIST_EXPECT(out[i] == 100 + i, "gather0d[%d] = %lld", i, (long long)out[i]);
        accel_tensor_free(g);
        accel_tensor_free(t);
    }
    /* gather_for_metrics of every dtype: the bytes come back as they were sent, rank by rank (metrics may be
     * labels in int64, masks in bool, logits in bfloat16). */
    for (int d = ACCEL_DTYPE_FLOAT32; d <= ACCEL_DTYPE_BOOL; ++d) {
        size_t es = 0;
        DIST_CHECK(accel_dtype_get_size((accel_dtype_t)d, &es));
        unsigned char mine[6 * 8], all[64 * 6 * 8];
        for (size_t i = 0; i < 6 * es; ++i)
            mine[i] = d == ACCEL_DTYPE_BOOL ? (unsigned char)((r + i) & 1) : (unsigned char)(r * 37 + i * 5 + d + 1);
        const int64_t shape[2] = {2, 3};
        accel_tensor_t *t = NULL, *g = NULL;
        DIST_CHECK(accel_tensor_create(mine, 6 * es, (accel_dtype_t)d, shape, 2, &t));
        DIST_CHECK(accel_accelerator_gather_for_metrics(acc, t, &g));
        accel_dtype_t gd = ACCEL_DTYPE_FLOAT32;
        int64_t gshape[4] = {0, 0, 0, 0};
        size_t gdims = 0;
        DIST_CHECK(accel_tensor_get_dtype(g, &gd));
        DIST_CHECK(accel_tensor_get_ndim(g, &gdims));
        DIST_CHECK(accel_tensor_get_shape(g, gshape, 4));
        DIST_EXPECT(gd == (accel_dtype_t)d && gdims == 2 && gshape[0] == 2 * p && gshape[1] == 3,
                    "gather_for_metrics of dtype %d: got dtype %d, %zu dims [%lld, %lld]", d, (int)gd, gdims,
                    (long long)gshape[0], (long long)gshape[1]);
        DIST_CHECK(accel_tensor_copy_to_buffer(g, all, (size_t)p * 6 * es));
        for (int q = 0; q < p; ++q)
            for (size_t i = 0; i < 6 * es; ++i) {
                unsigned char want =
                    d == ACCEL_DTYPE_BOOL ? (unsigned char)((q + i) & 1) : (unsigned char)(q * 37 + i * 5 + d + 1);
                DIST_EXPECT(all[(size_t)q * 6 * es + i] == want, "gather_for_metrics dtype %d: rank %d byte %zu is %u, "
                            "expected %u", d, q, i, all[(size_t)q * 6 * es + i], want);
            }
        accel_tensor_free(g);
        accel_tensor_free(t);
    }
    /* mismatched shapes are an error on every rank, not a hang */
    {
        float mine[4] = {0, 0, 0, 0};
        accel_tensor_t *t = dist_tensor_f32(mine, r == 0 ? 3 : 4), *g = NULL;
        accel_status_t st = accel_accelerator_gather(acc, t, &g);
        DIST_EXPECT(st == ACCEL_ERR_INVALID_ARGUMENT && g == NULL, "gather of different shapes: %s",
                    accel_status_name(st));
        DIST_EXPECT(strstr(accel_last_error_message(), "rank") != NULL, "message names the rank: %s",
                    accel_last_error_message());
        accel_tensor_free(t);
    }
    /* Triggers: only the last rank raises it; every rank sees it once, then it is clear. */
    {
        bool fired = true;
        DIST_CHECK(accel_accelerator_check_trigger(acc, &fired));
        DIST_EXPECT(!fired, "check_trigger with no trigger set returned true on rank %d", r);
        if (r == p - 1) DIST_CHECK(accel_accelerator_set_trigger(acc));
        DIST_CHECK(accel_accelerator_check_trigger(acc, &fired));
        DIST_EXPECT(fired, "rank %d did not see rank %d's trigger", r, p - 1);
        DIST_CHECK(accel_accelerator_check_trigger(acc, &fired));
        DIST_EXPECT(!fired, "the trigger was not cleared on rank %d", r);
    }
    DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
    printf("collectives ok on rank %d of %d (%s)\n", r, p, backend);
    accel_accelerator_free(acc);
    return 0;
}
