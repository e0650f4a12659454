/*
 * dist_stop MODE TIMEOUT_SECONDS ['<plugin JSON fragment>']
 *
 * A rank that stops (SIGSTOP, a debugger) must not hang the others: run_stop.py starts 2 processes, waits until
 * each printed "ready", then stops one (ACCEL_TEST_VICTIM) and times how long the others take to exit.
 *
 *   train  every rank trains a small MLP (prepared with the plugin given: DDP by default, FULL_SHARD, ZeRO-3) in a
 *          loop. The survivor's step must fail with DEADLINE_EXCEEDED or UNAVAILABLE and a message naming the
 *          stopped rank; it then frees everything and returns from main (the destruction and exit paths must not
 *          wait forever either). Exit 3 when so, 1 otherwise.
 *   idle   after "ready" every rank computes without any collective for 300 s: only a watchdog (accel launch's)
 *          can end the job. Exit 0 if nothing ended it.
 *   oom    (no SIGSTOP) rank ACCEL_TEST_VICTIM runs out of memory in its next forward (a batch whose hidden
 *          activation needs 4 GiB under an address-space limit 1 GiB above its use, as `ulimit -v` would set):
 *          it must get RESOURCE_EXHAUSTED saying "out of memory", then ends as a program does. The other rank's
 *          step must fail naming "rank R ran out of memory" (not "may be stuck"). Exit 3 when so.
 *   oom_collective  the same inside a collective: every rank gathers 200 MB, rank ACCEL_TEST_VICTIM with 256 MB of
 *          address space to spare (its second 200 MB receive buffer cannot be allocated).
 */
#include "dist_common.h"

#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { N = 8, F = 8, C = 4 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The address space in use now (VmSize), in bytes; 0 when unknown. */
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

/* Limits this process's address space to `margin` bytes above what it uses now (as `ulimit -v` would). */
static void limit_address_space(unsigned long long margin)
{
    const unsigned long long now_as = address_space_now();
    struct rlimit lim;
    DIST_EXPECT(now_as > 0 && getrlimit(RLIMIT_AS, &lim) == 0, "cannot read the address space");
    lim.rlim_cur = (rlim_t)(now_as + margin);
    DIST_EXPECT(setrlimit(RLIMIT_AS, &lim) == 0, "cannot limit the address space");
}

/* Prints how `what` ended; returns whether as expected: the victim out of memory, the other rank naming it. */
static int expect_oom(int rank, int victim, const char *what, accel_status_t st, double waited)
{
    const char *msg = st == ACCEL_OK ? "" : accel_last_error_message();
    char named[64];
    snprintf(named, sizeof named, "rank %d ran out of memory", victim);
    printf("rank %d: %s: %s after %.1f s: %s\n", rank, what, accel_status_name(st), waited, msg);
    if (rank == victim) return st == ACCEL_ERR_RESOURCE_EXHAUSTED && strstr(msg, "out of memory") != NULL;
    return st != ACCEL_OK && st != ACCEL_ERR_RESOURCE_EXHAUSTED && strstr(msg, named) != NULL;
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

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dist_stop MODE TIMEOUT [PLUGIN]\n");
        return 2;
    }
    const char *mode = argv[1];
    const char *plugin = argc > 3 ? argv[3] : "";
    const char *victim_env = getenv("ACCEL_TEST_VICTIM");
    const int victim = victim_env ? atoi(victim_env) : 0;
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "{\"kwargs_handlers\": {\"init_process_group\": {\"timeout\": %s}}%s%s}", argv[2],
             *plugin ? ", " : "", plugin);

    static float x[N * F];
    static int64_t y[N];
    for (int i = 0; i < N * F; ++i) x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < N; ++i) y[i] = i % C;
    const int64_t xs[2] = {N, F}, ys[1] = {N};
    struct run r = {0};
    int32_t rank = 0;
    DIST_CHECK(accel_accelerator_create(cfg, &r.acc));
    DIST_CHECK(accel_accelerator_get_process_index(r.acc, &rank));
    DIST_CHECK(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &r.x));
    DIST_CHECK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &r.y));
    const int oom = strcmp(mode, "oom") == 0;
    DIST_CHECK(accel_model_create_from_json(oom ? "{\"type\": \"mlp\", \"widths\": [8, 4096, 4]}"
                                                : "{\"type\": \"mlp\", \"widths\": [8, 16, 4], \"activation\": \"tanh\"}",
                                            &r.model));
    DIST_CHECK(accel_optimizer_create(r.model, "{\"type\": \"sgd\", \"lr\": 0.01}", &r.opt));
    DIST_CHECK(accel_accelerator_prepare(r.acc, r.model, r.opt, NULL, NULL));
    for (int i = 0; i < 3; ++i) DIST_CHECK(train_step(&r));
    printf("rank %d: ready (pid %ld)\n", rank, (long)getpid());
    fflush(stdout);

    if (strcmp(mode, "idle") == 0) {
        for (double t0 = now(); now() - t0 < 300.0;) usleep(100000); /* "computing", no collective */
        printf("rank %d: nothing ended the job\n", rank);
        return 0;
    }
    if (oom && rank == victim) {
        /* 2^18 rows: the hidden activation is 2^18 x 4096 floats, 4 GiB */
        enum { BIG = 1 << 18 };
        float *bx = calloc((size_t)BIG * F, sizeof(float));
        int64_t *by = calloc(BIG, sizeof(int64_t));
        DIST_EXPECT(bx != NULL && by != NULL, "cannot allocate the big batch");
        const int64_t bxs[2] = {BIG, F}, bys[1] = {BIG};
        accel_tensor_free(r.x);
        accel_tensor_free(r.y);
        DIST_CHECK(accel_tensor_create(bx, (size_t)BIG * F * sizeof(float), ACCEL_DTYPE_FLOAT32, bxs, 2, &r.x));
        DIST_CHECK(accel_tensor_create(by, (size_t)BIG * sizeof(int64_t), ACCEL_DTYPE_INT64, bys, 1, &r.y));
        free(bx);
        free(by);
        limit_address_space(1ULL << 30);
        double t0 = now();
        accel_status_t st = train_step(&r);
        int ok = expect_oom(rank, victim, "step on 262144 rows under a 1 GiB margin", st, now() - t0);
        accel_tensor_free(r.x);
        accel_tensor_free(r.y);
        accel_optimizer_free(r.opt);
        accel_model_free(r.model);
        accel_accelerator_free(r.acc);
        fflush(stdout);
        return ok ? 3 : 1;
    }
    if (strcmp(mode, "oom_collective") == 0) {
        enum { BIG = 50 << 20 }; /* floats: 200 MB */
        float *v = calloc(BIG, sizeof(float));
        DIST_EXPECT(v != NULL, "cannot allocate 200 MB");
        accel_tensor_t *t = dist_tensor_f32(v, BIG), *out = NULL;
        free(v);
        if (rank == victim) limit_address_space(256ULL << 20);
        double t0 = now();
        accel_status_t st = accel_accelerator_gather(r.acc, t, &out);
        int ok = expect_oom(rank, victim, "gather of 200 MB", st, now() - t0);
        accel_tensor_free(out);
        accel_tensor_free(t);
        fflush(stdout);
        _exit(ok ? 3 : 1); /* the peer's gather may still hold its buffers: no clean shutdown */
    }
    if (strcmp(mode, "train") != 0 && !oom) { /* oom: the other rank trains on until its step fails */
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    int ok = 0;
    for (long step = 0;; ++step) {
        double t0 = now();
        accel_status_t st = train_step(&r);
        if (st == ACCEL_OK) {
            usleep(20000);
            continue;
        }
        if (oom) {
            ok = expect_oom(rank, victim, "step while the victim is out of memory", st, now() - t0);
            break;
        }
        const char *msg = accel_last_error_message();
        printf("rank %d: step %ld failed after %.1f s: %s: %s\n", rank, step, now() - t0, accel_status_name(st), msg);
        char named[64];
        snprintf(named, sizeof named, "rank %d", victim);
        ok = (st == ACCEL_ERR_DEADLINE_EXCEEDED || st == ACCEL_ERR_UNAVAILABLE) && strstr(msg, named) != NULL;
        if (!ok) printf("rank %d: expected a failure naming \"%s\"\n", rank, named);
        break;
    }
    /* The ordinary end of a program: every handle freed, then exit (atexit handlers, LibTorch's statics). */
    double t0 = now();
    accel_tensor_free(r.x);
    accel_tensor_free(r.y);
    accel_optimizer_free(r.opt);
    accel_model_free(r.model);
    accel_accelerator_free(r.acc);
    printf("rank %d: freed in %.1f s, exiting\n", rank, now() - t0);
    fflush(stdout);
    return ok ? 3 : 1;
}
