/*
 * dist_mismatch MODE SYNC_DIR TIMEOUT_SECONDS ['<accelerator config JSON>']
 *
 * Collectives that the ranks do not all call (run_mismatch.py starts 2 processes by hand and checks each one's
 * exit status and output). The model is a small MLP prepared with the given (sharded) configuration and trained
 * one step on every rank first, so that the ranks have a history of matched collectives.
 *
 *   eval_barrier  rank 0 alone evaluates (accel_model_forward: a sharded model's all-gather) while rank 1 goes on
 *                 to wait_for_everyone (a barrier). Every rank must fail its collective with
 *                 ACCEL_ERR_FAILED_PRECONDITION and the message naming the rule, well before the timeout, and the
 *                 next collective must be ACCEL_ERR_ABORTED repeating it. Exit 3 when so.
 *   eval_train    rank 0 evaluates, then both train one more step: rank 0's training forward all-gathers while
 *                 rank 1's backward reduces (one collective later). Same expectations as eval_barrier.
 *   eval_idle     rank 0 evaluates while rank 1 is in no collective at all (it waits for rank 0's verdict, a file in
 *                 SYNC_DIR): a peer that may just be slow, so rank 0 waits for the timeout, then fails with
 *                 ACCEL_ERR_DEADLINE_EXCEEDED naming rank 1 as not in a collective; rank 1's next collective is
 *                 then ACCEL_ERR_ABORTED repeating rank 0's cause. Exit 3 when so.
 *   slow          a matched but slow collective: rank 1 computes (sleeps) DELAY seconds (ACCEL_TEST_DELAY) before the
 *                 same all-reduce rank 0 waits in, then both all-reduce a large tensor (ACCEL_TEST_BIG elements).
 *                 Both must succeed with the right sums. Exit 0.
 *
 * Before exiting, every rank writes SYNC_DIR/rankN.done and waits (bounded) for the others' files: a rank that
 * exits takes its connections (rank 0: the rendezvous store) with it, which would change what a slower peer sees.
 */
#include "dist_common.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

enum { N = 8, F = 8, C = 4 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void touch(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    DIST_EXPECT(f != NULL, "cannot write %s", path);
    fclose(f);
}

/* Waits (polling, at most `limit` seconds) for SYNC_DIR/name; returns whether it appeared. */
static int wait_file(const char *dir, const char *name, double limit)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (double t0 = now(); now() - t0 < limit; usleep(50000))
        if (access(path, F_OK) == 0) return 1;
    return 0;
}

/* Every rank's "done" file, then exit without a clean shutdown (a failed communicator has pending work). */
static void finish(const char *dir, int rank, int world, int code)
{
    char name[64];
    snprintf(name, sizeof name, "rank%d.done", rank);
    touch(dir, name);
    for (int r = 0; r < world; ++r) {
        snprintf(name, sizeof name, "rank%d.done", r);
        if (!wait_file(dir, name, 90.0)) fprintf(stderr, "rank %d: rank %d never finished\n", rank, r);
    }
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}

struct run {
    accel_accelerator_t *acc;
    accel_model_t *model;
    accel_optimizer_t *opt;
    accel_tensor_t *x, *y;
};

static accel_status_t train_step(struct run *r)
{
    accel_tensor_t *out = NULL, *loss = NULL;
    accel_status_t st = accel_model_forward(r->model, r->x, &out);
    if (st == ACCEL_OK) st = accel_loss_compute("cross_entropy", out, r->y, &loss);
    if (st == ACCEL_OK) st = accel_accelerator_backward(r->acc, loss);
    if (st == ACCEL_OK) st = accel_optimizer_step(r->opt);
    if (st == ACCEL_OK) st = accel_optimizer_zero_grad(r->opt);
    accel_tensor_free(out);
    accel_tensor_free(loss);
    return st;
}

/* Prints how a collective failed; returns 1 when it is `want` with every piece of `needles` (NULL-terminated). */
static int expect_failure(int rank, const char *what, accel_status_t st, double waited, accel_status_t want,
                          const char *const *needles)
{
    const char *msg = st == ACCEL_OK ? "(none)" : accel_last_error_message();
    printf("rank %d: %s: %s after %.1f s: %s\n", rank, what, accel_status_name(st), waited, msg);
    fflush(stdout);
    if (st != want) {
        printf("rank %d: expected %s\n", rank, accel_status_name(want));
        return 0;
    }
    for (const char *const *n = needles; *n != NULL; ++n)
        if (strstr(msg, *n) == NULL) {
            printf("rank %d: the message does not say \"%s\"\n", rank, *n);
            return 0;
        }
    return 1;
}

/* The collective after a failure repeats it as ABORTED. */
static int expect_aborted_next(struct run *r, int rank)
{
    static const char *const none[] = {"communication already failed", NULL};
    double t0 = now();
    accel_status_t st = accel_accelerator_wait_for_everyone(r->acc);
    return expect_failure(rank, "next collective", st, now() - t0, ACCEL_ERR_ABORTED, none);
}

static int run_slow(struct run *r, int rank)
{
    const double delay = getenv("ACCEL_TEST_DELAY") ? atof(getenv("ACCEL_TEST_DELAY")) : 4.0;
    const int64_t big = getenv("ACCEL_TEST_BIG") ? atoll(getenv("ACCEL_TEST_BIG")) : 16 << 20;
    float one = (float)(rank + 1);
    accel_tensor_t *t = dist_tensor_f32(&one, 1), *out = NULL;
    if (rank == 1) usleep((useconds_t)(delay * 1e6)); /* "computing" before the same collective */
    double t0 = now();
    DIST_CHECK(accel_accelerator_reduce(r->acc, t, "sum", &out));
    float got = 0.0f;
    DIST_CHECK(accel_tensor_copy_to_buffer(out, &got, sizeof got));
    printf("rank %d: all-reduce after a %.1f s delay on rank 1: waited %.1f s, sum %g\n", rank, delay, now() - t0,
           (double)got);
    DIST_EXPECT(got == 3.0f, "sum %g", (double)got);
    accel_tensor_free(t);
    accel_tensor_free(out);
    float *v = malloc((size_t)big * sizeof(float));
    DIST_EXPECT(v != NULL, "out of memory");
    for (int64_t i = 0; i < big; ++i) v[i] = (float)(i % 7);
    t = dist_tensor_f32(v, big);
    t0 = now();
    DIST_CHECK(accel_accelerator_reduce(r->acc, t, "sum", &out));
    DIST_CHECK(accel_tensor_copy_to_buffer(out, v, (size_t)big * sizeof(float)));
    printf("rank %d: all-reduce of %lld floats took %.1f s\n", rank, (long long)big, now() - t0);
    for (int64_t i = 0; i < big; i += 4099) DIST_EXPECT(v[i] == 2.0f * (float)(i % 7), "element %lld", (long long)i);
    free(v);
    accel_tensor_free(t);
    accel_tensor_free(out);
    DIST_CHECK(accel_accelerator_wait_for_everyone(r->acc));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: dist_mismatch MODE SYNC_DIR TIMEOUT [CONFIG]\n");
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2];
    char cfg[2048];
    const char *plugin = argc > 4 ? argv[4] : "";
    snprintf(cfg, sizeof cfg, "{\"kwargs_handlers\": {\"init_process_group\": {\"timeout\": %s}}%s%s}", argv[3],
             *plugin ? ", " : "", plugin);

    static float x[N * F];
    static int64_t y[N];
    for (int i = 0; i < N * F; ++i) x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < N; ++i) y[i] = i % C;
    const int64_t xs[2] = {N, F}, ys[1] = {N};
    struct run r = {0};
    int32_t rank = 0, world = 0;
    DIST_CHECK(accel_accelerator_create(cfg, &r.acc));
    DIST_CHECK(accel_accelerator_get_process_index(r.acc, &rank));
    DIST_CHECK(accel_accelerator_get_num_processes(r.acc, &world));
    DIST_CHECK(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &r.x));
    DIST_CHECK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &r.y));
    DIST_CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [8, 16, 4], \"activation\": \"tanh\"}",
                                            &r.model));
    DIST_CHECK(accel_optimizer_create(r.model, "{\"type\": \"sgd\", \"lr\": 0.1}", &r.opt));
    DIST_CHECK(accel_accelerator_prepare(r.acc, r.model, r.opt, NULL, NULL));
    DIST_CHECK(train_step(&r)); /* matched collectives first */

    if (strcmp(mode, "slow") == 0) {
        int rc = run_slow(&r, rank);
        finish(dir, rank, world, rc);
    }

    static const char *const rule[] = {"a sharded model's forward runs on every rank", "gather_for_metrics",
                                       "all_gather", NULL};
    static const char *const idle[] = {"not in a collective", NULL};
    int ok = 0;
    double t0 = now();
    if (strcmp(mode, "eval_barrier") == 0 || strcmp(mode, "eval_train") == 0) {
        accel_status_t st;
        if (rank == 0) {
            accel_tensor_t *out = NULL;
            st = accel_model_forward_no_grad(r.model, r.x, &out); /* "evaluate on the main process only" */
            accel_tensor_free(out);
            if (st == ACCEL_OK && strcmp(mode, "eval_train") == 0) st = train_step(&r);
        } else {
            st = strcmp(mode, "eval_barrier") == 0 ? accel_accelerator_wait_for_everyone(r.acc) : train_step(&r);
        }
        ok = expect_failure(rank, "mismatched collective", st, now() - t0, ACCEL_ERR_FAILED_PRECONDITION, rule) &&
             expect_aborted_next(&r, rank);
    } else if (strcmp(mode, "eval_idle") == 0) {
        if (rank == 0) {
            accel_tensor_t *out = NULL;
            accel_status_t st = accel_model_forward_no_grad(r.model, r.x, &out);
            accel_tensor_free(out);
            ok = expect_failure(rank, "collective with an idle peer", st, now() - t0, ACCEL_ERR_DEADLINE_EXCEEDED, idle);
            touch(dir, "rank0.failed");
        } else {
            DIST_EXPECT(wait_file(dir, "rank0.failed", 120.0), "rank 0 never failed");
            static const char *const peer[] = {"rank 0 failed", "not in a collective", NULL};
            t0 = now();
            accel_status_t st = accel_accelerator_wait_for_everyone(r.acc);
            ok = expect_failure(rank, "collective after rank 0 failed", st, now() - t0, ACCEL_ERR_ABORTED, peer);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    finish(dir, rank, world, ok ? 3 : 1);
    return 1;
}
