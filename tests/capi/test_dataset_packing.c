/* Sequence packing ("packing" in accel_dataloader_create_from_iterable_dataset's config): documents of varying
 * length, each followed by the EOS id, concatenated and cut into windows of block_size + 1 tokens (stride
 * block_size). The windows equal a hand computation of the packed stream (labels = inputs shifted, EOS
 * between documents, the last short window kept padded or dropped per drop_last); resume through save_state /
 * load_state gives the uninterrupted run's windows, for a dataset with state and one without; bad keys and
 * documents are refused by name. */
#define _POSIX_C_SOURCE 200809L
#include "capi_helpers.h"

#define DOCS 9
#define EOS 9999
#define MAX_TOKENS 256

/* Document k: (k * 5) % 7 tokens 100k, 100k + 1, ... (document 0 and 7 are empty). mode: 0 documents,
 * 1 a 2-d document 2, 2 a float document 2, 3 labels with document 2. */
struct docs {
    int64_t next, epoch, state_bytes, loads;
    int stateful, mode;
};

static int64_t doc_len(int64_t k) { return (k * 5) % 7; }

static accel_status_t docs_set_epoch(void *user_data, int64_t epoch)
{
    struct docs *d = (struct docs *)user_data;
    d->epoch = epoch;
    d->next = 0;
    return ACCEL_OK;
}

static accel_status_t docs_next(void *user_data, accel_tensor_t **out_inputs, accel_tensor_t **out_labels)
{
    struct docs *d = (struct docs *)user_data;
    int64_t k = d->next, t[8], i, shape[2];
    if (k >= DOCS) return ACCEL_OK;
    d->next += 1;
    shape[0] = doc_len(k);
    for (i = 0; i < shape[0]; ++i) t[i] = 100 * k + i;
    if (k == 2 && d->mode == 1) {
        shape[0] = 1;
        shape[1] = doc_len(k);
        *out_inputs = tensor_i64(t, shape, 2);
    } else if (k == 2 && d->mode == 2) {
        float f[8] = {0};
        *out_inputs = tensor_f32(f, shape, 1);
    } else {
        *out_inputs = tensor_i64(t, shape, 1);
        if (k == 2 && d->mode == 3) *out_labels = tensor_i64(t, shape, 1);
    }
    return ACCEL_OK;
}

static accel_status_t docs_state(void *user_data, const uint8_t **out_data, size_t *out_len)
{
    struct docs *d = (struct docs *)user_data;
    d->state_bytes = d->next;
    *out_data = (const uint8_t *)&d->state_bytes;
    *out_len = sizeof d->state_bytes;
    return ACCEL_OK;
}

static accel_status_t docs_load_state(void *user_data, const uint8_t *data, size_t len)
{
    struct docs *d = (struct docs *)user_data;
    if (len != sizeof d->next) {
        accel_callback_set_error("docs: bad state");
        return ACCEL_ERR_DATA_LOSS;
    }
    memcpy(&d->next, data, len);
    d->loads += 1;
    return ACCEL_OK;
}

static accel_iterable_dataset_t docs_dataset(struct docs *d)
{
    accel_iterable_dataset_t ds;
    ds.set_epoch = docs_set_epoch;
    ds.next = docs_next;
    ds.state = d->stateful ? docs_state : NULL;
    ds.load_state = d->stateful ? docs_load_state : NULL;
    ds.release = NULL;
    ds.user_data = d;
    return ds;
}

static struct docs docs_make(int stateful, int mode)
{
    struct docs d;
    d.next = 0;
    d.epoch = -1;
    d.state_bytes = 0;
    d.loads = 0;
    d.stateful = stateful;
    d.mode = mode;
    return d;
}

/* The packed stream by hand, then its windows as "inputs|labels;" text (-100 at padding, 0 padding inputs);
 * drop_last also drops a short last batch of `batch_size` windows. */
static void expected_text(int64_t n, int eos, int drop_last, int64_t batch_size, char *out, size_t cap)
{
    int64_t s[MAX_TOKENS], len = 0, k, i, start, windows = 0, full;
    size_t at = 0;
    for (k = 0; k < DOCS; ++k) {
        for (i = 0; i < doc_len(k); ++i) s[len++] = 100 * k + i;
        if (eos) s[len++] = EOS;
    }
    out[0] = '\0';
    full = len >= n + 1 ? (len - 1) / n : 0;
    for (start = 0; start + 1 < len; start += n, ++windows) {
        int64_t have = len - start > n + 1 ? n + 1 : len - start;
        if (drop_last && (have < n + 1 || windows >= full / batch_size * batch_size)) break;
        for (i = 0; i < n; ++i) at += (size_t)snprintf(out + at, cap - at, " %lld", (long long)(i < have - 1 ? s[start + i] : 0));
        at += (size_t)snprintf(out + at, cap - at, "|");
        for (i = 0; i < n; ++i)
            at += (size_t)snprintf(out + at, cap - at, " %lld", (long long)(i < have - 1 ? s[start + i + 1] : -100));
        at += (size_t)snprintf(out + at, cap - at, ";");
    }
}

/* The rest of the pass as the same text; checks each batch's shape and that labels are inputs shifted. */
static int packed_text(accel_dataloader_t *dl, int64_t n, int64_t batch_size, char *out, size_t cap)
{
    size_t at = 0;
    int batches = 0;
    out[0] = '\0';
    for (;;) {
        accel_batch_t *b = NULL;
        accel_tensor_t *in = NULL, *lab = NULL;
        int64_t size = 0, r, i, x[MAX_TOKENS], y[MAX_TOKENS];
        accel_status_t st = accel_dataloader_next(dl, &b);
        if (st != ACCEL_OK) {
            snprintf(out, cap, "!%s: %s", accel_status_name(st), accel_last_error_message());
            return -1;
        }
        if (b == NULL) return batches;
        ++batches;
        CHECK_OK(accel_batch_get_size(b, &size));
        CHECK(size >= 1 && size <= batch_size);
        CHECK_OK(accel_batch_get_inputs(b, &in));
        CHECK_OK(accel_batch_get_labels(b, &lab));
        CHECK(shape2_is(in, size, n) && shape2_is(lab, size, n));
        CHECK_OK(accel_tensor_copy_to_buffer(in, x, (size_t)(size * n) * sizeof(int64_t)));
        CHECK_OK(accel_tensor_copy_to_buffer(lab, y, (size_t)(size * n) * sizeof(int64_t)));
        for (r = 0; r < size; ++r) {
            for (i = 0; i + 1 < n; ++i) CHECK(y[r * n + i] == x[r * n + i + 1] || y[r * n + i + 1] == -100);
            for (i = 0; i < n; ++i) at += (size_t)snprintf(out + at, cap - at, " %lld", (long long)x[r * n + i]);
            at += (size_t)snprintf(out + at, cap - at, "|");
            for (i = 0; i < n; ++i) at += (size_t)snprintf(out + at, cap - at, " %lld", (long long)y[r * n + i]);
            at += (size_t)snprintf(out + at, cap - at, ";");
        }
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_batch_free(b);
        if (at + 512 >= cap) return -1;
    }
}

static int packed_workers = 0; /* "num_workers" of the loaders made next */

static accel_dataloader_t *packed_loader(struct docs *d, int64_t n, int eos, int drop_last, int64_t batch_size)
{
    char config[256];
    accel_dataloader_t *dl = NULL;
    accel_iterable_dataset_t ds = docs_dataset(d);
    if (eos)
        snprintf(config, sizeof config,
                 "{\"batch_size\": %lld, \"drop_last\": %s, \"num_workers\": %d, \"packing\": {\"block_size\": %lld, \"eos_token_id\": %d}}",
                 (long long)batch_size, drop_last ? "true" : "false", packed_workers, (long long)n, EOS);
    else
        snprintf(config, sizeof config, "{\"batch_size\": %lld, \"drop_last\": %s, \"num_workers\": %d, \"packing\": {\"block_size\": %lld}}",
                 (long long)batch_size, drop_last ? "true" : "false", packed_workers, (long long)n);
    CHECK_OK(accel_dataloader_create_from_iterable_dataset(&ds, NULL, NULL, config, &dl));
    return dl;
}

/* Windows equal the hand-packed stream: with and without EOS, drop_last both ways, several block sizes
 * (the stream has 27 tokens with EOS, 18 without), two passes (each pass starts the packing afresh). */
static void test_windows(void)
{
    static const int64_t sizes[] = {1, 4, 5, 17, 40};
    char want[16384], got[16384];
    size_t s;
    int eos, drop_last, pass;
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
        for (eos = 0; eos < 2; ++eos)
            for (drop_last = 0; drop_last < 2; ++drop_last) {
                struct docs d = docs_make(1, 0);
                accel_dataloader_t *dl = packed_loader(&d, sizes[s], eos, drop_last, 3);
                expected_text(sizes[s], eos, drop_last, 3, want, sizeof want);
                for (pass = 0; pass < 2 && dl != NULL; ++pass) {
                    CHECK(packed_text(dl, sizes[s], 3, got, sizeof got) >= 0);
                    if (strcmp(want, got) != 0) {
                        CHECK(!"the packed windows differ from the hand-packed stream");
                        fprintf(stderr, "  block %lld eos %d drop_last %d pass %d\n  want %s\n  got  %s\n",
                                (long long)sizes[s], eos, drop_last, pass, want, got);
                    }
                }
                accel_dataloader_free(dl);
            }
    /* The short last window is really kept without drop_last: 27 tokens, block 4 -> 6 full windows and
     * one of 3 tokens. */
    expected_text(4, 1, 0, 3, want, sizeof want);
    CHECK(strstr(want, "-100") != NULL);
    expected_text(4, 1, 1, 1, want, sizeof want);
    CHECK(strstr(want, "-100") == NULL);
}

/* save_state after 2 batches; load_state in a new run: the rest equals the uninterrupted run's. */
static void resume_case(int stateful, int64_t n, const char *dir)
{
    char rest[16384], resumed[16384];
    struct docs d1 = docs_make(stateful, 0), d2 = docs_make(stateful, 0);
    accel_accelerator_t *acc = NULL;
    accel_dataloader_t *dl = NULL;
    accel_batch_t *b = NULL;
    int i;

    CHECK_OK(accel_accelerator_create(NULL, &acc));
    dl = packed_loader(&d1, n, 1, 0, 2);
    CHECK_OK(accel_accelerator_prepare_dataloader(acc, dl));
    for (i = 0; i < 2; ++i) {
        CHECK_OK(accel_dataloader_next(dl, &b));
        accel_batch_free(b);
        b = NULL;
    }
    CHECK_OK(accel_accelerator_save_state(acc, dir));
    CHECK(packed_text(dl, n, 2, rest, sizeof rest) > 0);
    accel_accelerator_free(acc);
    accel_dataloader_free(dl);

    CHECK_OK(accel_accelerator_create(NULL, &acc));
    dl = packed_loader(&d2, n, 1, 0, 2);
    CHECK_OK(accel_accelerator_prepare_dataloader(acc, dl));
    CHECK_OK(accel_accelerator_load_state(acc, dir));
    CHECK(packed_text(dl, n, 2, resumed, sizeof resumed) > 0);
    CHECK(d2.loads == stateful); /* the documents' state was loaded, not re-read from 0 */
    if (strcmp(rest, resumed) != 0) {
        CHECK(!"the resumed packed pass differs from the uninterrupted one");
        fprintf(stderr, "  stateful %d block %lld\n  uninterrupted %s\n  resumed       %s\n", stateful, (long long)n, rest, resumed);
    }
    accel_accelerator_free(acc);
    accel_dataloader_free(dl);
}

static void test_resume(void)
{
    char dir[] = "/tmp/accel_packing_resume_XXXXXX";
    char sub[64];
    int stateful;
    if (mkdtemp(dir) == NULL) {
        CHECK(!"mkdtemp");
        return;
    }
    /* Block 3: the save falls inside a document (tokens carried over); block 2 too, at another offset. */
    for (stateful = 0; stateful < 2; ++stateful) {
        snprintf(sub, sizeof sub, "%s/s%d_3", dir, stateful);
        resume_case(stateful, 3, sub);
        snprintf(sub, sizeof sub, "%s/s%d_2", dir, stateful);
        resume_case(stateful, 2, sub);
    }
}

static accel_status_t one_length(void *user_data, int64_t *out)
{
    (void)user_data;
    *out = 1;
    return ACCEL_OK;
}

static accel_status_t one_get(void *user_data, int64_t index, accel_tensor_t **out_inputs, accel_tensor_t **out_labels)
{
    int64_t t = index, shape[1] = {1};
    (void)user_data;
    (void)out_labels;
    *out_inputs = tensor_i64(&t, shape, 1);
    return ACCEL_OK;
}

static void test_bad_keys(void)
{
    struct docs d = docs_make(1, 0);
    accel_iterable_dataset_t ds = docs_dataset(&d);
    accel_dataloader_t *dl = NULL;
    char got[4096];
    int mode;
    static const char *const documents[] = {"", "is not a 1-d integer token sequence", "is not a 1-d integer token sequence",
                                            "has labels"};
    CHECK_FAILS(accel_dataloader_create_from_iterable_dataset(&ds, NULL, NULL, "{\"packing\": {\"block_size\": 0}}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "packing.block_size");
    CHECK_FAILS(accel_dataloader_create_from_iterable_dataset(&ds, NULL, NULL, "{\"packing\": {\"eos_token_id\": 2}}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "packing.block_size: required");
    CHECK_FAILS(accel_dataloader_create_from_iterable_dataset(&ds, NULL, NULL, "{\"packing\": {\"block_size\": 4, \"eos\": 2}}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "eos");
    CHECK_FAILS(accel_dataloader_create_from_iterable_dataset(
                    &ds, NULL, NULL, "{\"collate\": \"pad\", \"packing\": {\"block_size\": 4}}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "packing: windows all have block_size tokens");
    {
        accel_map_dataset_t m;
        memset(&m, 0, sizeof m);
        m.length = one_length;
        m.get = one_get;
        CHECK_FAILS(accel_dataloader_create_from_map_dataset(&m, NULL, NULL, "{\"packing\": {\"block_size\": 4}}", &dl),
                    ACCEL_ERR_INVALID_ARGUMENT, "packing: needs an iterable dataset");
    }
    for (mode = 1; mode < 4; ++mode) {
        struct docs bad = docs_make(1, mode);
        dl = packed_loader(&bad, 4, 1, 0, 2);
        CHECK(packed_text(dl, 4, 2, got, sizeof got) == -1);
        CHECK(strstr(got, "ACCEL_ERR_INVALID_ARGUMENT") != NULL && strstr(got, "packing: document 2") != NULL &&
              strstr(got, documents[mode]) != NULL);
        if (strstr(got, documents[mode]) == NULL) fprintf(stderr, "  mode %d: %s\n", mode, got);
        accel_dataloader_free(dl);
    }
}

int main(void)
{
    test_windows();
    test_resume();
    packed_workers = 2; /* a thread reads the documents ahead: the same windows, and resume stays exact */
    test_windows();
    test_resume();
    packed_workers = 0;
    test_bad_keys();
    return capi_report("test_dataset_packing");
}
