/* accel/dataloader.h: lengths, passes and epochs, seeded shuffling, skip_first_batches, batch contents,
 * bad inputs. Features are built so that row i holds the value i, so each batch says which rows it has. */
#include "capi_helpers.h"

#define N 10

static accel_tensor_t *g_features = NULL; /* [N, 2], row i = (i, i) */
static accel_tensor_t *g_labels = NULL;   /* [N] int64, label i = 100 + i */

static accel_dataloader_t *make_loader(const char *config, int with_labels)
{
    accel_dataloader_t *dl = NULL;
    CHECK_OK(accel_dataloader_create_from_tensors(g_features, with_labels ? g_labels : NULL, config, &dl));
    return dl;
}

static int64_t length_of(const accel_dataloader_t *dl)
{
    int64_t n = -1;
    CHECK_OK(accel_dataloader_get_length(dl, &n));
    return n;
}

static int64_t epoch_of(const accel_dataloader_t *dl)
{
    int64_t e = -1;
    CHECK_OK(accel_dataloader_get_epoch(dl, &e));
    return e;
}

/* Runs one whole pass: writes the row indices in order to `rows` (capacity N * 2), the batch sizes to
 * `sizes`, and returns the number of batches (-1 on error). Checks inputs and labels agree. */
static int one_pass(accel_dataloader_t *dl, int64_t *rows, size_t *nrows, int64_t *sizes)
{
    int batches = 0;
    *nrows = 0;
    for (;;) {
        accel_batch_t *b = NULL;
        accel_tensor_t *in = NULL, *lab = NULL;
        int64_t size = -1, i;
        float x[2 * N];
        int64_t y[N];
        if (accel_dataloader_next(dl, &b) != ACCEL_OK) {
            CHECK(!"accel_dataloader_next failed");
            fprintf(stderr, "  %s\n", accel_last_error_message());
            return -1;
        }
        if (b == NULL) break;
        CHECK_OK(accel_batch_get_size(b, &size));
        CHECK(size >= 1 && size <= N);
        if (sizes != NULL) sizes[batches] = size;
        ++batches;
        CHECK_OK(accel_batch_get_inputs(b, &in));
        CHECK(shape2_is(in, size, 2));
        CHECK_OK(accel_batch_get_labels(b, &lab));
        /* Free the batch first: the tensors stay valid. */
        accel_batch_free(b);
        if (in != NULL && read_f32(in, x, (size_t)size * 2) == 0) {
            for (i = 0; i < size; ++i) {
                CHECK(x[2 * i] == x[2 * i + 1]);
                if (*nrows < 2 * N) rows[(*nrows)++] = (int64_t)x[2 * i];
            }
        }
        if (lab != NULL) {
            CHECK(numel_of(lab) == size);
            CHECK_OK(accel_tensor_copy_to_buffer(lab, y, (size_t)size * sizeof(int64_t)));
            for (i = 0; i < size; ++i) CHECK(y[i] == 100 + (int64_t)x[2 * i]);
        }
        accel_tensor_free(in);
        accel_tensor_free(lab);
        if (batches > 4 * N) return -1;
    }
    return batches;
}

static int is_permutation(const int64_t *rows, size_t n)
{
    int seen[N] = {0};
    size_t i;
    if (n != N) return 0;
    for (i = 0; i < n; ++i) {
        if (rows[i] < 0 || rows[i] >= N || seen[rows[i]]) return 0;
        seen[rows[i]] = 1;
    }
    return 1;
}

static void test_lengths(void)
{
    static const struct {
        const char *config;
        int64_t length;
    } cases[] = {
        {"{\"batch_size\": 3}", 4},
        {"{\"batch_size\": 3, \"drop_last\": true}", 3},
        {"{\"batch_size\": 5}", 2},
        {"{\"batch_size\": 5, \"drop_last\": true}", 2},
        {"{\"batch_size\": 10, \"drop_last\": true}", 1},
        {"{\"batch_size\": 20}", 1},
        {"{\"batch_size\": 20, \"drop_last\": true}", 0},
        {"{}", 10},
        {"{\"batch_size\": 1, \"shuffle\": true, \"seed\": 1}", 10},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        accel_dataloader_t *dl = make_loader(cases[i].config, 1);
        int64_t rows[2 * N], sizes[4 * N + 1];
        size_t nrows = 0;
        int batches;
        CHECK(length_of(dl) == cases[i].length);
        /* A pass yields exactly length batches. */
        batches = one_pass(dl, rows, &nrows, sizes);
        CHECK(batches == cases[i].length);
        accel_dataloader_free(dl);
    }
}

static void test_pass_and_epochs(void)
{
    accel_dataloader_t *dl = make_loader("{\"batch_size\": 3}", 1);
    int64_t rows[2 * N], sizes[4 * N + 1];
    size_t nrows = 0, i;
    int batches;
    accel_batch_t *b = NULL;

    CHECK(epoch_of(dl) == 0);
    batches = one_pass(dl, rows, &nrows, sizes);
    CHECK(batches == 4);
    CHECK(sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 3 && sizes[3] == 1);
    /* No shuffle: rows in order. */
    CHECK(nrows == N);
    for (i = 0; i < nrows; ++i) CHECK(rows[i] == (int64_t)i);
    /* The pass ended with ACCEL_OK and a NULL batch: the epoch moved on. */
    CHECK(epoch_of(dl) == 1);
    /* The next call starts the next pass. */
    CHECK_OK(accel_dataloader_next(dl, &b));
    CHECK(b != NULL);
    CHECK(epoch_of(dl) == 1);
    accel_batch_free(b);
    b = NULL;
    batches = one_pass(dl, rows, &nrows, sizes);
    CHECK(batches == 3); /* the rest of pass 1 */
    CHECK(nrows == 7 && rows[0] == 3);
    CHECK(epoch_of(dl) == 2);

    /* drop_last: 3 batches of 3, row 9 never appears. */
    accel_dataloader_free(dl);
    dl = make_loader("{\"batch_size\": 3, \"drop_last\": true}", 0);
    batches = one_pass(dl, rows, &nrows, sizes);
    CHECK(batches == 3);
    CHECK(nrows == 9);
    for (i = 0; i < nrows; ++i) CHECK(rows[i] != 9);
    /* Without labels, batches have none. */
    CHECK_OK(accel_dataloader_next(dl, &b));
    {
        accel_tensor_t *lab = (accel_tensor_t *)&lab;
        CHECK_OK(accel_batch_get_labels(b, &lab));
        CHECK(lab == NULL);
    }
    accel_batch_free(b);
    accel_dataloader_free(dl);
}

static void test_shuffle(void)
{
    accel_dataloader_t *a = make_loader("{\"batch_size\": 4, \"shuffle\": true, \"seed\": 42}", 1);
    accel_dataloader_t *b = make_loader("{\"batch_size\": 4, \"shuffle\": true, \"seed\": 42}", 1);
    accel_dataloader_t *c = make_loader("{\"batch_size\": 4, \"shuffle\": true, \"seed\": 43}", 1);
    int64_t a0[2 * N], a1[2 * N], b0[2 * N], b1[2 * N], c0[2 * N], x[2 * N];
    size_t na0, na1, nb0, nb1, nc0, nx;
    int64_t identity[N];
    size_t i;

    for (i = 0; i < N; ++i) identity[i] = (int64_t)i;
    CHECK(one_pass(a, a0, &na0, NULL) == 3);
    CHECK(one_pass(a, a1, &na1, NULL) == 3);
    CHECK(one_pass(b, b0, &nb0, NULL) == 3);
    CHECK(one_pass(b, b1, &nb1, NULL) == 3);
    CHECK(one_pass(c, c0, &nc0, NULL) == 3);
    CHECK(is_permutation(a0, na0) && is_permutation(a1, na1) && is_permutation(c0, nc0));
    /* Reproducible: the same seed gives the same order, pass by pass. */
    CHECK(memcmp(a0, b0, sizeof identity) == 0);
    CHECK(memcmp(a1, b1, sizeof identity) == 0);
    /* Different between epochs, between seeds, and actually shuffled. */
    CHECK(memcmp(a0, a1, sizeof identity) != 0);
    CHECK(memcmp(a0, c0, sizeof identity) != 0);
    CHECK(memcmp(a0, identity, sizeof identity) != 0);

    /* set_epoch: a fresh loader set to epoch 1 gives pass 1's order. */
    accel_dataloader_free(b);
    b = make_loader("{\"batch_size\": 4, \"shuffle\": true, \"seed\": 42}", 1);
    CHECK_OK(accel_dataloader_set_epoch(b, 1));
    CHECK(epoch_of(b) == 1);
    CHECK(one_pass(b, x, &nx, NULL) == 3);
    CHECK(memcmp(x, a1, sizeof identity) == 0);
    CHECK(epoch_of(b) == 2);
    /* set_epoch in the middle of a pass restarts it. */
    {
        accel_batch_t *batch = NULL;
        CHECK_OK(accel_dataloader_next(b, &batch));
        accel_batch_free(batch);
        CHECK_OK(accel_dataloader_set_epoch(b, 0));
        CHECK(one_pass(b, x, &nx, NULL) == 3);
        CHECK(nx == N && memcmp(x, a0, sizeof identity) == 0);
    }
    CHECK_FAILS(accel_dataloader_set_epoch(b, -1), ACCEL_ERR_OUT_OF_RANGE, "epoch");
    CHECK_FAILS(accel_dataloader_set_epoch(NULL, 0), ACCEL_ERR_INVALID_ARGUMENT, "dataloader");

    /* Without a seed, the seed comes from the default generator: set_seed makes it reproducible. */
    accel_dataloader_free(a);
    accel_dataloader_free(b);
    CHECK_OK(accel_random_set_seed(7, false, false));
    a = make_loader("{\"batch_size\": 4, \"shuffle\": true}", 1);
    CHECK_OK(accel_random_set_seed(7, false, false));
    b = make_loader("{\"batch_size\": 4, \"shuffle\": true}", 1);
    CHECK(one_pass(a, a0, &na0, NULL) == 3);
    CHECK(one_pass(b, b0, &nb0, NULL) == 3);
    CHECK(is_permutation(a0, na0));
    CHECK(memcmp(a0, b0, sizeof identity) == 0);

    accel_dataloader_free(a);
    accel_dataloader_free(b);
    accel_dataloader_free(c);
}

static void test_skip_first_batches(void)
{
    accel_dataloader_t *src = make_loader("{\"batch_size\": 3}", 1);
    accel_dataloader_t *skip = NULL;
    int64_t rows[2 * N], sizes[4 * N + 1], full[2 * N];
    size_t nrows, nfull, i;

    CHECK_OK(accel_dataloader_skip_first_batches(src, 2, &skip));
    CHECK(skip != NULL);
    CHECK(length_of(skip) == 2);
    CHECK(length_of(src) == 4); /* the source is untouched */
    CHECK(epoch_of(skip) == 0);
    /* First pass: batches 2 and 3 only (rows 6..9). */
    CHECK(one_pass(skip, rows, &nrows, sizes) == 2);
    CHECK(nrows == 4);
    for (i = 0; i < nrows; ++i) CHECK(rows[i] == (int64_t)(6 + i));
    CHECK(epoch_of(skip) == 1);
    /* Later passes are whole. */
    CHECK(length_of(skip) == 4);
    CHECK(one_pass(skip, rows, &nrows, sizes) == 4);
    CHECK(nrows == N);
    accel_dataloader_free(skip);
    skip = NULL;

    /* Skipping everything, or more: an empty first pass. */
    CHECK_OK(accel_dataloader_skip_first_batches(src, 4, &skip));
    CHECK(length_of(skip) == 0);
    CHECK(one_pass(skip, rows, &nrows, sizes) == 0);
    CHECK(one_pass(skip, rows, &nrows, sizes) == 4);
    accel_dataloader_free(skip);
    CHECK_OK(accel_dataloader_skip_first_batches(src, 100, &skip));
    CHECK(length_of(skip) == 0);
    accel_dataloader_free(skip);
    CHECK_OK(accel_dataloader_skip_first_batches(src, 0, &skip));
    CHECK(length_of(skip) == 4);
    accel_dataloader_free(skip);

    /* Negative: OUT_OF_RANGE. */
    skip = (accel_dataloader_t *)&skip;
    CHECK_FAILS(accel_dataloader_skip_first_batches(src, -1, &skip), ACCEL_ERR_OUT_OF_RANGE, "num_batches");
    CHECK(skip == NULL);
    CHECK_FAILS(accel_dataloader_skip_first_batches(NULL, 1, &skip), ACCEL_ERR_INVALID_ARGUMENT, "dataloader");
    CHECK_FAILS(accel_dataloader_skip_first_batches(src, 1, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    accel_dataloader_free(src);

    /* With shuffling: the same order as the source's pass at the same epoch, minus the skipped batches. */
    src = make_loader("{\"batch_size\": 3, \"shuffle\": true, \"seed\": 5}", 1);
    CHECK_OK(accel_dataloader_set_epoch(src, 3));
    CHECK_OK(accel_dataloader_skip_first_batches(src, 1, &skip));
    CHECK(epoch_of(skip) == 3);
    CHECK(one_pass(src, full, &nfull, NULL) == 4);
    CHECK(one_pass(skip, rows, &nrows, NULL) == 3);
    CHECK(nfull == N && nrows == N - 3);
    CHECK(memcmp(rows, full + 3, (N - 3) * sizeof(int64_t)) == 0);
    /* Its next pass is epoch 4 of the same sampler. */
    CHECK(one_pass(src, full, &nfull, NULL) == 4);
    CHECK(one_pass(skip, rows, &nrows, NULL) == 4);
    CHECK(memcmp(rows, full, N * sizeof(int64_t)) == 0);
    accel_dataloader_free(skip);
    accel_dataloader_free(src);
}

static void bad_config(const char *json, const char *fragment, int line)
{
    accel_dataloader_t *dl = (accel_dataloader_t *)&dl;
    accel_status_t st = accel_dataloader_create_from_tensors(g_features, g_labels, json, &dl);
    const char *msg = accel_last_error_message();
    ++capi_checks;
    if (st != ACCEL_ERR_INVALID_ARGUMENT || strstr(msg, fragment) == NULL || dl != NULL) {
        ++capi_failures;
        fprintf(stderr, "%s:%d: config %s: expected ACCEL_ERR_INVALID_ARGUMENT with \"%s\", got %s: \"%s\"\n",
                __FILE__, line, json, fragment, accel_status_name(st), msg);
    }
    if (st == ACCEL_OK) accel_dataloader_free(dl);
}
#define BAD_CONFIG(json, fragment) bad_config(json, fragment, __LINE__)

static void test_bad_inputs(void)
{
    accel_dataloader_t *dl = (accel_dataloader_t *)&dl;
    accel_batch_t *b = NULL;
    accel_tensor_t *t = NULL;
    int64_t n;

    BAD_CONFIG("{\"batch_size\": 0}", "batch_size");
    BAD_CONFIG("{\"batch_size\": -4}", "batch_size");
    BAD_CONFIG("{\"batch_size\": \"4\"}", "batch_size");
    BAD_CONFIG("{\"batch_size\": 2.5}", "batch_size");
    BAD_CONFIG("{\"batch_size\": 4, \"shuffle\": \"yes\"}", "shuffle");
    BAD_CONFIG("{\"seed\": -1}", "seed");
    BAD_CONFIG("{\"drop_last\": 1}", "drop_last");
    BAD_CONFIG("{\"batch_size\": 4, \"num_worker\": 2}", "num_worker: unknown key");
    BAD_CONFIG("{\"num_workers\": -1}", "num_workers");
    BAD_CONFIG("{\"prefetch_factor\": 0}", "prefetch_factor");
    BAD_CONFIG("{\"batch_size\": 4", "malformed JSON");
    BAD_CONFIG("4", "JSON object");

    /* Labels whose first dimension differs from the features'. */
    {
        int64_t lab[N + 1] = {0};
        int64_t shape[1] = {N + 1};
        int64_t scalar = 3;
        accel_tensor_t *bad = tensor_i64(lab, shape, 1), *sc = NULL;
        dl = (accel_dataloader_t *)&dl;
        CHECK_FAILS(accel_dataloader_create_from_tensors(g_features, bad, "{}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                    "labels");
        CHECK(dl == NULL);
        CHECK_OK(accel_tensor_create(&scalar, sizeof scalar, ACCEL_DTYPE_INT64, NULL, 0, &sc));
        CHECK_FAILS(accel_dataloader_create_from_tensors(g_features, sc, "{}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                    "labels");
        /* Scalar features have no samples. */
        CHECK_FAILS(accel_dataloader_create_from_tensors(sc, NULL, "{}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                    "features");
        accel_tensor_free(bad);
        accel_tensor_free(sc);
    }
    CHECK_FAILS(accel_dataloader_create_from_tensors(NULL, g_labels, "{}", &dl), ACCEL_ERR_INVALID_ARGUMENT,
                "features");
    CHECK_FAILS(accel_dataloader_create_from_tensors(g_features, g_labels, "{}", NULL), ACCEL_ERR_INVALID_ARGUMENT,
                "out");

    /* NULL handles and outs. */
    CHECK_FAILS(accel_dataloader_next(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "dataloader");
    CHECK_FAILS(accel_dataloader_get_length(NULL, &n), ACCEL_ERR_INVALID_ARGUMENT, "dataloader");
    CHECK_FAILS(accel_dataloader_get_epoch(NULL, &n), ACCEL_ERR_INVALID_ARGUMENT, "dataloader");
    CHECK_FAILS(accel_batch_get_inputs(NULL, &t), ACCEL_ERR_INVALID_ARGUMENT, "batch");
    CHECK_FAILS(accel_batch_get_labels(NULL, &t), ACCEL_ERR_INVALID_ARGUMENT, "batch");
    CHECK_FAILS(accel_batch_get_size(NULL, &n), ACCEL_ERR_INVALID_ARGUMENT, "batch");
    dl = make_loader("{\"batch_size\": 4}", 1);
    CHECK_FAILS(accel_dataloader_next(dl, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_dataloader_get_length(dl, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_dataloader_get_epoch(dl, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_OK(accel_dataloader_next(dl, &b));
    CHECK_FAILS(accel_batch_get_inputs(b, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_batch_get_labels(b, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_batch_get_size(b, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
    accel_batch_free(b);
    accel_dataloader_free(dl);
}

/* A dataset without samples: length 0, every pass ends at once, shuffled or not, prepared or not. */
static void test_empty_dataset(void)
{
    int64_t shape[2] = {0, 3};
    accel_tensor_t *e = NULL;
    accel_dataloader_t *dl = NULL;
    accel_accelerator_t *acc = NULL;
    accel_batch_t *b = (accel_batch_t *)&b;
    int64_t rows[2 * N];
    size_t nrows;

    CHECK_OK(accel_tensor_create(NULL, 0, ACCEL_DTYPE_FLOAT32, shape, 2, &e));
    CHECK_OK(accel_dataloader_create_from_tensors(e, NULL, "{\"batch_size\": 2, \"shuffle\": true}", &dl));
    CHECK(length_of(dl) == 0);
    CHECK_OK(accel_dataloader_next(dl, &b));
    CHECK(b == NULL);
    CHECK(epoch_of(dl) == 1);
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_prepare_dataloader(acc, dl));
    CHECK(one_pass(dl, rows, &nrows, NULL) == 0);
    accel_accelerator_free(acc);
    accel_dataloader_free(dl);
    accel_tensor_free(e);
}

/* The loader shares the tensors: the caller may free its handles right away. */
static void test_caller_frees_tensors(void)
{
    float x[4 * 3];
    int64_t shape[2] = {4, 3};
    accel_tensor_t *f;
    accel_dataloader_t *dl = NULL;
    accel_batch_t *b = NULL;
    accel_tensor_t *in = NULL;
    float got[2 * 3];
    int i;

    for (i = 0; i < 12; ++i) x[i] = (float)i;
    f = tensor_f32(x, shape, 2);
    CHECK_OK(accel_dataloader_create_from_tensors(f, NULL, "{\"batch_size\": 2}", &dl));
    accel_tensor_free(f);
    CHECK_OK(accel_dataloader_next(dl, &b));
    accel_batch_free(b);
    b = NULL;
    CHECK_OK(accel_dataloader_next(dl, &b)); /* the second batch: rows 2 and 3 */
    CHECK_OK(accel_batch_get_inputs(b, &in));
    if (read_f32(in, got, 6) == 0)
        for (i = 0; i < 6; ++i) CHECK(got[i] == (float)(6 + i));
    accel_tensor_free(in);
    accel_batch_free(b);
    accel_dataloader_free(dl);
}

int main(void)
{
    float x[N * 2];
    int64_t y[N];
    int64_t fshape[2] = {N, 2}, lshape[1] = {N};
    int i;
    for (i = 0; i < N; ++i) {
        x[2 * i] = x[2 * i + 1] = (float)i;
        y[i] = 100 + i;
    }
    g_features = tensor_f32(x, fshape, 2);
    g_labels = tensor_i64(y, lshape, 1);

    test_lengths();
    test_pass_and_epochs();
    test_shuffle();
    test_skip_first_batches();
    test_bad_inputs();
    test_caller_frees_tensors();
    test_empty_dataset();

    accel_tensor_free(g_features);
    accel_tensor_free(g_labels);
    return capi_report("test_dataloader");
}
