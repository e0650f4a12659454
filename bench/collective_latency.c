/*
 * Latency of the smallest collectives (a program, not a test; see BENCHMARKS.md, "Mismatched collectives"):
 *
 *   bench_collective_latency [ROUNDS] [OPS]
 *
 * Under `accel launch -n 2`: ROUNDS rounds of OPS one-float all-reduces (accel_accelerator_reduce "sum") and OPS
 * barriers (wait_for_everyone); prints the median over rounds of the time per operation in microseconds (rank 0).
 * Their cost is almost all per-call overhead, which is where the bookkeeping of mismatched collectives (a
 * sequence number and the wait recorded per collective) would show.
 */
#include "bench_common.h"

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 7, ops = argc > 2 ? atoi(argv[2]) : 2000;
    accel_accelerator_t *acc = NULL;
    CHECK(accel_accelerator_create(NULL, &acc));
    int32_t rank = 0;
    CHECK(accel_accelerator_get_process_index(acc, &rank));
    float one = 1.0f;
    int64_t shape[1] = {1};
    accel_tensor_t *t = NULL;
    CHECK(accel_tensor_create(&one, sizeof one, ACCEL_DTYPE_FLOAT32, shape, 1, &t));
    double *reduce_us = calloc((size_t)rounds, sizeof(double)), *barrier_us = calloc((size_t)rounds, sizeof(double));
    for (int r = -1; r < rounds; ++r) { /* round -1: warm-up */
        double t0 = now();
        for (int i = 0; i < ops; ++i) {
            accel_tensor_t *out = NULL;
            CHECK(accel_accelerator_reduce(acc, t, "sum", &out));
            accel_tensor_free(out);
        }
        double t1 = now();
        for (int i = 0; i < ops; ++i) CHECK(accel_accelerator_wait_for_everyone(acc));
        double t2 = now();
        if (r >= 0) {
            reduce_us[r] = (t1 - t0) / ops * 1e6;
            barrier_us[r] = (t2 - t1) / ops * 1e6;
        }
    }
    qsort(reduce_us, (size_t)rounds, sizeof(double), cmp);
    qsort(barrier_us, (size_t)rounds, sizeof(double), cmp);
    if (rank == 0)
        printf("all_reduce(1 float) %.1f us, barrier %.1f us (median of %d rounds of %d)\n", reduce_us[rounds / 2],
               barrier_us[rounds / 2], rounds, ops);
    free(reduce_us);
    free(barrier_us);
    accel_tensor_free(t);
    accel_accelerator_free(acc);
    return 0;
}
