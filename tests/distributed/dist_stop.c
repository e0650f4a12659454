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
    DIST_CHECK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [8, 16, 4], \"activation\": \"tanh\"}",
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
    if (strcmp(mode, "train") != 0) {
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
        const char *msg = accel_last_error_message();
        printf("rank %d: step %ld failed after %.1f s: %s: %s\n", rank, step, now() - t0, accel_status_name(st), msg);
        char named[32];
        snprintf(named, sizeof named, "rank %d", victim);
        ok = (st == ACCEL_ERR_DEADLINE_EXCEEDED || st == ACCEL_ERR_UNAVAILABLE) && strstr(msg, named) != NULL;
        if (!ok) printf("rank %d: expected DEADLINE_EXCEEDED or UNAVAILABLE naming %s\n", rank, named);
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
