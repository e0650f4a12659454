/*
 * dist_join MODE [CONFIG]
 *
 * join_uneven_inputs on P Gloo processes: a Linear(F, 1) trained with MSE and plain SGD while the processes run
 * out of batches at different steps. The weights every process ends with must equal a reference computed here by
 * hand from every process's batches: at step t the gradient is the sum over the processes that still have a batch
 * of their mean-loss gradient, divided by P (DDP's average, with Join's divide_by_initial_world_size), so a
 * finished process counts as zero. Prints "join: ok rank r of P".
 *
 * MODE "shard": one prepared data loader over N samples; join_uneven_inputs_begin(even_batches=0) overrides the
 *   accelerator's even_batches (true), so rank r gets global batches r, r + P, ... and the ranks differ by one
 *   batch; the loader's length inside and after the scope is checked. Steps with accel_accelerator_train_step.
 * MODE "own": each process its own unprepared loader of 2 + 3r batches (much more uneven), even_batches false in
 *   CONFIG; forward / backward / step by hand, with gradient accumulation 2 when CONFIG says so.
 * MODE "misuse": the calls refused by name (end without begin, nesting, NULL joinables).
 */
#include "dist_common.h"

#include <math.h>
#include <string.h>

#define F 4
#define BS 2
#define LR 0.1

/* Sample i of process `owner` (owner -1: the shared data set): features and target, deterministic. */
static void sample(int owner, int i, float *x, float *y)
{
    for (int k = 0; k < F; ++k) x[k] = (float)sin(0.37 * (i + 1) * (k + 1) + 1.3 * owner);
    *y = (float)cos(0.11 * i + 0.7 * owner);
}

typedef struct {
    double w[F], b;
} linear_t;

/* The gradient of the mean squared error of `p` on n samples, added to `g` times `scale`. */
static void add_grad(const linear_t *p, const float *x, const float *y, int n, double scale, linear_t *g)
{
    for (int i = 0; i < n; ++i) {
        double out = p->b;
        for (int k = 0; k < F; ++k) out += p->w[k] * x[i * F + k];
        const double d = 2.0 * (out - y[i]) / n * scale;
        for (int k = 0; k < F; ++k) g->w[k] += d * x[i * F + k];
        g->b += d;
    }
}

static int32_t num_processes(accel_accelerator_t *acc)
{
    int32_t p = 0;
    DIST_CHECK(accel_accelerator_get_num_processes(acc, &p));
    return p;
}

/* The model's weight and bias (a Linear(F, 1): the F-element parameter and the 1-element one). */
static linear_t read_linear(accel_model_t *model)
{
    linear_t l;
    size_t count = 0;
    DIST_CHECK(accel_model_get_num_parameters(model, &count));
    DIST_EXPECT(count == 2, "expected a weight and a bias, got %zu parameters", count);
    for (size_t i = 0; i < count; ++i) {
        const char *name = NULL;
        accel_tensor_t *t = NULL;
        float buf[F];
        DIST_CHECK(accel_model_get_parameter_name(model, i, &name));
        DIST_CHECK(accel_model_get_tensor(model, name, &t));
        const int64_t n = dist_numel(t);
        DIST_CHECK(accel_tensor_copy_to_buffer(t, buf, (size_t)n * sizeof(float)));
        accel_tensor_free(t);
        if (n == F)
            for (int k = 0; k < F; ++k) l.w[k] = buf[k];
        else
            l.b = buf[0];
    }
    return l;
}

static void expect_weights(const linear_t *got, const linear_t *want, const char *what)
{
    for (int k = 0; k <= F; ++k) {
        const double g = k < F ? got->w[k] : got->b, w = k < F ? want->w[k] : want->b;
        DIST_EXPECT(fabs(g - w) <= 1e-5, "%s: parameter %d is %.8f, the reference %.8f", what, k, g, w);
    }
}

/* Steps SGD on `ref` over `steps` steps; batch(t, r) names process r's batch at step t (n = 0: none left). */
typedef int (*batch_fn)(int t, int r, int p, float *x, float *y);
static void reference(linear_t *ref, int steps, int p, int accumulation, batch_fn batch)
{
    float x[BS * F], y[BS];
    linear_t g;
    memset(&g, 0, sizeof g);
    /* A process's micro-steps after its last synchronised one are never communicated: when it runs out, it
       shadows the others with zeros (as with PyTorch's Join), so what it accumulated under no_sync is lost. */
    int counted[16];
    for (int r = 0; r < p && r < 16; ++r) {
        int n = 0;
        while (n < steps && batch(n, r, p, x, y) > 0) ++n;
        counted[r] = n - n % accumulation;
    }
    for (int t = 0; t < steps; ++t) {
        for (int r = 0; r < p; ++r) {
            const int n = batch(t, r, p, x, y);
            if (n > 0 && t < counted[r]) add_grad(ref, x, y, n, 1.0 / p / accumulation, &g);
        }
        if ((t + 1) % accumulation != 0) continue; /* the optimizer steps on sync micro-steps only */
        for (int k = 0; k < F; ++k) ref->w[k] -= LR * g.w[k];
        ref->b -= LR * g.b;
        memset(&g, 0, sizeof g);
    }
}

/* "shard": N samples of the shared set, global batch k of BS samples owned by process k % P. */
#define N_SHARED 22
static int shared_batch(int t, int r, int p, float *x, float *y)
{
    const int k = t * p + r, first = k * BS;
    int n = 0;
    for (int i = first; i < first + BS && i < N_SHARED; ++i, ++n) sample(-1, i, x + n * F, y + n);
    return n;
}

/* "own": process r has 2 + 3r batches of its own samples. */
static int own_batch(int t, int r, int p, float *x, float *y)
{
    (void)p;
    if (t >= 2 + 3 * r) return 0;
    for (int j = 0; j < BS; ++j) sample(r, t * BS + j, x + j * F, y + j);
    return BS;
}

static accel_dataloader_t *make_loader(int owner, int n)
{
    float x[64 * F], y[64];
    for (int i = 0; i < n; ++i) sample(owner, i, x + i * F, y + i);
    const int64_t xs[2] = {n, F}, ys[2] = {n, 1};
    accel_tensor_t *features = NULL, *labels = NULL;
    accel_dataloader_t *dl = NULL;
    char config[64];
    snprintf(config, sizeof config, "{\"batch_size\": %d, \"shuffle\": false}", BS);
    DIST_CHECK(accel_tensor_create(x, (size_t)n * F * sizeof(float), ACCEL_DTYPE_FLOAT32, xs, 2, &features));
    DIST_CHECK(accel_tensor_create(y, (size_t)n * sizeof(float), ACCEL_DTYPE_FLOAT32, ys, 2, &labels));
    DIST_CHECK(accel_dataloader_create_from_tensors(features, labels, config, &dl));
    accel_tensor_free(features);
    accel_tensor_free(labels);
    return dl;
}

static int64_t loader_length(accel_dataloader_t *dl)
{
    int64_t n = 0;
    DIST_CHECK(accel_dataloader_get_length(dl, &n));
    return n;
}

/* One pass over `dl` inside the join scope; returns the batches seen. */
static int train_pass(accel_accelerator_t *acc, accel_model_t *model, accel_optimizer_t *opt, accel_dataloader_t *dl,
                      int by_hand)
{
    int seen = 0;
    for (;;) {
        accel_batch_t *b = NULL;
        DIST_CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) return seen;
        ++seen;
        if (!by_hand) {
            double loss = 0.0;
            DIST_CHECK(accel_accelerator_train_step(acc, model, opt, NULL, b, "mse", &loss));
            accel_batch_free(b);
            continue;
        }
        accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
        DIST_CHECK(accel_accelerator_accumulate_begin(acc, model));
        DIST_CHECK(accel_batch_get_inputs(b, &in));
        DIST_CHECK(accel_batch_get_labels(b, &lab));
        DIST_CHECK(accel_model_forward(model, in, &out));
        DIST_CHECK(accel_loss_compute("mse", out, lab, &loss));
        DIST_CHECK(accel_accelerator_backward(acc, loss));
        DIST_CHECK(accel_optimizer_step(opt));
        DIST_CHECK(accel_optimizer_zero_grad(opt));
        DIST_CHECK(accel_accelerator_accumulate_end(acc));
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_tensor_free(out);
        accel_tensor_free(loss);
        accel_batch_free(b);
    }
}

static void expect_status(accel_status_t st, accel_status_t want, const char *fragment, const char *what)
{
    DIST_EXPECT(st == want && strstr(accel_last_error_message(), fragment) != NULL,
                "%s: got %s \"%s\", expected %s with \"%s\"", what, accel_status_name(st), accel_last_error_message(),
                accel_status_name(want), fragment);
}

static void misuse(accel_accelerator_t *acc, accel_model_t *model)
{
    expect_status(accel_accelerator_join_uneven_inputs_end(acc), ACCEL_ERR_FAILED_PRECONDITION,
                  "no matching accel_accelerator_join_uneven_inputs_begin", "end without begin");
    expect_status(accel_accelerator_join_uneven_inputs_begin(acc, NULL, 1, -1), ACCEL_ERR_INVALID_ARGUMENT,
                  "joinables", "NULL joinables");
    expect_status(accel_accelerator_join_uneven_inputs_begin(acc, &model, 1, 2), ACCEL_ERR_INVALID_ARGUMENT,
                  "even_batches", "even_batches 2");
    DIST_CHECK(accel_accelerator_join_uneven_inputs_begin(acc, &model, 1, -1));
    expect_status(accel_accelerator_join_uneven_inputs_begin(acc, &model, 1, -1), ACCEL_ERR_FAILED_PRECONDITION,
                  "does not nest", "nested begin");
    expect_status(accel_accelerator_free_memory(acc), ACCEL_ERR_FAILED_PRECONDITION, "join_uneven_inputs",
                  "free_memory inside the scope");
    DIST_CHECK(accel_accelerator_join_uneven_inputs_end(acc));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: dist_join shard|own|misuse [CONFIG]\n");
        return 2;
    }
    const char *mode = argv[1], *config = argc > 2 ? argv[2] : NULL;
    int32_t rank = 0;
    DIST_CHECK(accel_process_get_index(&rank));
    DIST_CHECK(accel_random_set_seed(100 + (uint64_t)rank, false, false)); /* DDP must broadcast rank 0's weights */
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    DIST_CHECK(accel_accelerator_create(config, &acc));
    const int p = num_processes(acc);
    char spec[64], opt_config[64];
    snprintf(spec, sizeof spec, "{\"type\": \"mlp\", \"widths\": [%d, 1]}", F);
    snprintf(opt_config, sizeof opt_config, "{\"type\": \"sgd\", \"lr\": %g}", LR);
    DIST_CHECK(accel_model_create_from_json(spec, &model));
    DIST_CHECK(accel_optimizer_create(model, opt_config, &opt));

    if (strcmp(mode, "shard") == 0) {
        accel_dataloader_t *dl = make_loader(-1, N_SHARED);
        DIST_CHECK(accel_accelerator_prepare(acc, model, opt, dl, NULL));
        const linear_t start = read_linear(model);
        const int global = (N_SHARED + BS - 1) / BS, even = (global + p - 1) / p;
        const int mine = global / p + (rank < global % p ? 1 : 0);
        DIST_EXPECT(loader_length(dl) == even, "length before the scope: %lld, expected %d (even_batches)",
                    (long long)loader_length(dl), even);
        DIST_CHECK(accel_accelerator_join_uneven_inputs_begin(acc, &model, 1, 0));
        DIST_EXPECT(loader_length(dl) == mine, "length inside the scope: %lld, expected %d (even_batches overridden)",
                    (long long)loader_length(dl), mine);
        const int seen = train_pass(acc, model, opt, dl, 0);
        DIST_EXPECT(seen == mine, "%d batches, expected %d", seen, mine);
        DIST_CHECK(accel_accelerator_join_uneven_inputs_end(acc));
        DIST_EXPECT(loader_length(dl) == even, "length after the scope: %lld, expected %d (restored)",
                    (long long)loader_length(dl), even);
        linear_t ref = start;
        reference(&ref, even, p, 1, shared_batch);
        const linear_t got = read_linear(model);
        expect_weights(&got, &ref, "shard");
        accel_dataloader_free(dl);
    } else if (strcmp(mode, "own") == 0) {
        accel_dataloader_t *dl = make_loader(rank, (2 + 3 * rank) * BS); /* not prepared: this process's own data */
        DIST_CHECK(accel_accelerator_prepare(acc, model, opt, NULL, NULL));
        const linear_t start = read_linear(model);
        int64_t accumulation = 1;
        DIST_CHECK(accel_accelerator_get_gradient_accumulation_steps(acc, &accumulation));
        DIST_CHECK(accel_accelerator_join_uneven_inputs_begin(acc, NULL, 0, -1));
        const int seen = train_pass(acc, model, opt, dl, 1);
        DIST_EXPECT(seen == 2 + 3 * rank, "%d batches, expected %d", seen, 2 + 3 * rank);
        DIST_CHECK(accel_accelerator_join_uneven_inputs_end(acc));
        linear_t ref = start;
        reference(&ref, 2 + 3 * (p - 1), p, (int)accumulation, own_batch);
        const linear_t got = read_linear(model);
        expect_weights(&got, &ref, "own");
        accel_dataloader_free(dl);
    } else if (strcmp(mode, "misuse") == 0) {
        DIST_CHECK(accel_accelerator_prepare(acc, model, opt, NULL, NULL));
        misuse(acc, model);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("join: ok rank %d of %d\n", (int)rank, p);
    fflush(stdout);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
