/* An iterable dataset written in C on 2 processes (issue 35), under `accel launch -n 2`:
 *   dist_datasets dispatch|shard CHECKPOINT_DIR
 * dispatch: dispatch_batches unset (Accelerate's default for iterable datasets: rank 0 reads, every rank gets
 * its slice; rank 1's dataset fails if it is ever called); shard: dispatch_batches false (IterableDatasetShard,
 * every rank reads the whole stream). 21 samples, batch 3: the batches of pass 0 are checked against the spec's
 * tables (uneven end: padded from the pass's first samples); pass 1 is saved after 2 batches and resumed by a
 * new accelerator and loader, which must give the batches the uninterrupted pass gave.
 *   dist_datasets pack_dispatch|pack_shard CHECKPOINT_DIR
 * The same with sequence packing: a stream of documents packed into windows ("packing") gives on each rank the
 * batches of a stream of the same windows packed by hand, under the same split (so packing composes with the
 * spec's tables checked above), and resumes exactly mid-pass.
 *   dist_datasets map CHECKPOINT_DIR
 * A map-style dataset written in C (the same 21 rows), shuffled and sharded: saved mid-pass and resumed by a new
 * accelerator and loader, it gives the uninterrupted run's batches. */
#include "dist_common.h"

#include <string.h>

#define N 21

struct stream {
    int64_t pos;
    int forbidden; /* rank 1 when dispatching: never called */
    int mode;      /* MODE_ROWS, MODE_DOCS (documents to pack), MODE_WINDOWS (the same packed by hand) */
};

enum { MODE_ROWS, MODE_DOCS, MODE_WINDOWS };

/* Packing: NDOCS documents, document d = 100d, 100d + 1, ... (1 + d % 3 tokens), each followed by EOS -1; windows
 * of PBLOCK + 1 tokens PBLOCK apart, the last short one padded (inputs 0, labels -100). */
#define NDOCS 17
#define PBLOCK 3
static int64_t g_packed[4 * NDOCS];
static int64_t g_packed_len, g_windows;

static void pack_by_hand(void)
{
    int64_t d, k;
    for (d = 0; d < NDOCS; ++d) {
        for (k = 0; k <= d % 3; ++k) g_packed[g_packed_len++] = 100 * d + k;
        g_packed[g_packed_len++] = -1;
    }
    g_windows = (g_packed_len - PBLOCK - 1) / PBLOCK + 1;
    if (g_packed_len - g_windows * PBLOCK >= 2) ++g_windows; /* the short last window has a label */
}

static accel_status_t doc_next(struct stream *s, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    int64_t doc[3], shape = 1 + s->pos % 3, k, x[PBLOCK], y[PBLOCK];
    if (s->mode == MODE_DOCS) {
        if (s->pos >= NDOCS) return ACCEL_OK;
        for (k = 0; k < shape; ++k) doc[k] = 100 * s->pos + k;
        ++s->pos;
        return accel_tensor_create(doc, (size_t)shape * sizeof(int64_t), ACCEL_DTYPE_INT64, &shape, 1, inputs);
    }
    if (s->pos >= g_windows) return ACCEL_OK;
    for (k = 0; k < PBLOCK; ++k) {
        const int64_t at = s->pos * PBLOCK + k;
        x[k] = at + 1 < g_packed_len ? g_packed[at] : 0; /* a token without a label is padding too */
        y[k] = at + 1 < g_packed_len ? g_packed[at + 1] : -100;
    }
    ++s->pos;
    shape = PBLOCK;
    if (accel_tensor_create(x, sizeof x, ACCEL_DTYPE_INT64, &shape, 1, inputs) != ACCEL_OK) return ACCEL_ERR_INTERNAL;
    return accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, &shape, 1, labels);
}

static accel_status_t s_epoch(void *ud, int64_t epoch)
{
    struct stream *s = (struct stream *)ud;
    (void)epoch;
    if (s->forbidden) {
        accel_callback_set_error("rank 1's dataset was called although rank 0 dispatches");
        return ACCEL_ERR_INTERNAL;
    }
    s->pos = 0;
    return ACCEL_OK;
}

static accel_status_t s_next(void *ud, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    struct stream *s = (struct stream *)ud;
    float x[2];
    int64_t shape = 2, y;
    if (s->forbidden) {
        accel_callback_set_error("rank 1's dataset was called although rank 0 dispatches");
        return ACCEL_ERR_INTERNAL;
    }
    if (s->mode != MODE_ROWS) return doc_next(s, inputs, labels);
    if (s->pos >= N) return ACCEL_OK;
    x[0] = (float)s->pos;
    x[1] = (float)-s->pos;
    y = 100 + s->pos++;
    if (accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, &shape, 1, inputs) != ACCEL_OK) return ACCEL_ERR_INTERNAL;
    return accel_tensor_create(&y, sizeof y, ACCEL_DTYPE_INT64, NULL, 0, labels);
}

static accel_status_t s_state(void *ud, const uint8_t **data, size_t *len)
{
    *data = (const uint8_t *)&((struct stream *)ud)->pos;
    *len = sizeof(int64_t);
    return ACCEL_OK;
}

static accel_status_t s_load(void *ud, const uint8_t *data, size_t len)
{
    if (len != sizeof(int64_t)) return ACCEL_ERR_DATA_LOSS;
    memcpy(&((struct stream *)ud)->pos, data, len);
    return ACCEL_OK;
}

/* Up to `max` batches (-1: the rest of the pass) as text "[i i i]..." of the first input column, checking
 * the labels travelled with the inputs. */
static void take(accel_dataloader_t *dl, int max, char *out, size_t cap)
{
    size_t len = 0;
    int k;
    out[0] = '\0';
    for (k = 0; max < 0 || k < max; ++k) {
        accel_batch_t *b = NULL;
        accel_tensor_t *in = NULL, *lab = NULL;
        int64_t n = 0, i, y[8];
        float x[16];
        DIST_CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        DIST_CHECK(accel_batch_get_size(b, &n));
        DIST_CHECK(accel_batch_get_inputs(b, &in));
        DIST_CHECK(accel_batch_get_labels(b, &lab));
        DIST_EXPECT(n <= 8, "batch of %lld", (long long)n);
        DIST_CHECK(accel_tensor_copy_to_buffer(in, x, (size_t)n * 2 * sizeof(float)));
        DIST_CHECK(accel_tensor_copy_to_buffer(lab, y, (size_t)n * sizeof(int64_t)));
        len += (size_t)snprintf(out + len, cap - len, "[");
        for (i = 0; i < n; ++i) {
            DIST_EXPECT(y[i] == 100 + (int64_t)x[2 * i], "label %lld for input %g", (long long)y[i], (double)x[2 * i]);
            len += (size_t)snprintf(out + len, cap - len, i ? " %d" : "%d", (int)x[2 * i]);
        }
        len += (size_t)snprintf(out + len, cap - len, "]");
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_batch_free(b);
    }
}

/* Up to `max` batches (-1: the rest of the pass) of token windows as text, inputs then labels of each row. */
static void take_tokens(accel_dataloader_t *dl, int max, char *out, size_t cap)
{
    size_t len = 0;
    int k;
    out[0] = '\0';
    for (k = 0; max < 0 || k < max; ++k) {
        accel_batch_t *b = NULL;
        accel_tensor_t *in = NULL, *lab = NULL;
        int64_t n = 0, i, x[8 * PBLOCK], y[8 * PBLOCK];
        DIST_CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        DIST_CHECK(accel_batch_get_size(b, &n));
        DIST_EXPECT(n <= 8, "batch of %lld", (long long)n);
        DIST_CHECK(accel_batch_get_inputs(b, &in));
        DIST_CHECK(accel_batch_get_labels(b, &lab));
        DIST_CHECK(accel_tensor_copy_to_buffer(in, x, (size_t)n * PBLOCK * sizeof(int64_t)));
        DIST_CHECK(accel_tensor_copy_to_buffer(lab, y, (size_t)n * PBLOCK * sizeof(int64_t)));
        len += (size_t)snprintf(out + len, cap - len, "[");
        for (i = 0; i < n * PBLOCK; ++i) len += (size_t)snprintf(out + len, cap - len, " %lld", (long long)x[i]);
        len += (size_t)snprintf(out + len, cap - len, " |");
        for (i = 0; i < n * PBLOCK; ++i) len += (size_t)snprintf(out + len, cap - len, " %lld", (long long)y[i]);
        len += (size_t)snprintf(out + len, cap - len, "]");
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_batch_free(b);
    }
}

static accel_status_t m_length(void *ud, int64_t *out)
{
    (void)ud;
    *out = N;
    return ACCEL_OK;
}

static accel_status_t m_get(void *ud, int64_t index, accel_tensor_t **inputs, accel_tensor_t **labels)
{
    struct stream s;
    (void)ud;
    s.pos = index;
    s.forbidden = 0;
    s.mode = MODE_ROWS;
    return s_next(&s, inputs, labels);
}

/* map: pass 0 whole, 2 batches of pass 1, save, the rest; then resumed by a new accelerator and loader. */
static int run_map(const char *dir)
{
    accel_accelerator_t *acc = NULL;
    accel_dataloader_t *dl = NULL;
    accel_map_dataset_t d = {m_length, m_get, NULL, NULL};
    static char pass0[512], rest[512], resumed[512];
    int32_t rank = 0;
    int round;
    for (round = 0; round < 2; ++round) {
        DIST_CHECK(accel_accelerator_create("{}", &acc));
        DIST_CHECK(accel_accelerator_get_process_index(acc, &rank));
        DIST_CHECK(accel_dataloader_create_from_map_dataset(&d, NULL, NULL, "{\"batch_size\": 3, \"shuffle\": true, \"seed\": 4}", &dl));
        DIST_CHECK(accel_accelerator_prepare_dataloader(acc, dl));
        if (round == 0) {
            take(dl, -1, pass0, sizeof pass0);
            take(dl, 2, rest, sizeof rest);
            DIST_CHECK(accel_accelerator_save_state(acc, dir));
            take(dl, -1, rest, sizeof rest);
        } else {
            DIST_CHECK(accel_accelerator_load_state(acc, dir));
            take(dl, -1, resumed, sizeof resumed);
        }
        accel_dataloader_free(dl);
        accel_accelerator_free(acc);
    }
    DIST_EXPECT(strcmp(rest, resumed) == 0 && strlen(rest) > 0, "rank %d map: resumed %s, uninterrupted %s", (int)rank,
                resumed, rest);
    printf("rank %d map: pass 0 %s; resumed pass 1 %s\n", (int)rank, pass0, resumed);
    return 0;
}

static accel_dataloader_t *make_loader(accel_accelerator_t *acc, struct stream *s)
{
    accel_iterable_dataset_t d;
    accel_dataloader_t *dl = NULL;
    d.set_epoch = s_epoch;
    d.next = s_next;
    d.state = s_state;
    d.load_state = s_load;
    d.release = NULL;
    d.user_data = s;
    DIST_CHECK(accel_dataloader_create_from_iterable_dataset(
        &d, NULL, NULL,
        s->mode == MODE_ROWS ? "{\"batch_size\": 3}"
        : s->mode == MODE_DOCS ? "{\"batch_size\": 2, \"packing\": {\"block_size\": 3, \"eos_token_id\": -1}}"
                               : "{\"batch_size\": 2}",
        &dl));
    DIST_CHECK(accel_accelerator_prepare_dataloader(acc, dl));
    return dl;
}

/* pack_dispatch / pack_shard: the packed loader's batches on this rank equal the hand-packed windows' (pass 0
 * whole), and a save after 2 batches of pass 1 resumes to the uninterrupted rest. */
static int run_packing(const char *config, int dispatch, const char *dir)
{
    accel_accelerator_t *acc = NULL;
    accel_dataloader_t *dl, *ref;
    struct stream docs = {0, 0, MODE_DOCS}, windows = {0, 0, MODE_WINDOWS}, docs2 = {0, 0, MODE_DOCS};
    static char packed[4096], by_hand[4096], rest[4096], resumed[4096];
    int32_t rank = 0;
    pack_by_hand();
    DIST_CHECK(accel_accelerator_create(config, &acc));
    DIST_CHECK(accel_accelerator_get_process_index(acc, &rank));
    docs.forbidden = windows.forbidden = docs2.forbidden = dispatch && rank != 0;
    dl = make_loader(acc, &docs);
    ref = make_loader(acc, &windows);
    take_tokens(dl, -1, packed, sizeof packed);
    take_tokens(ref, -1, by_hand, sizeof by_hand);
    DIST_EXPECT(strcmp(packed, by_hand) == 0 && strlen(packed) > 0, "rank %d: packed %s, by hand %s", (int)rank, packed,
                by_hand);
    accel_dataloader_free(ref);
    take_tokens(dl, 2, rest, sizeof rest);
    DIST_CHECK(accel_accelerator_save_state(acc, dir));
    take_tokens(dl, -1, rest, sizeof rest);
    accel_dataloader_free(dl);
    accel_accelerator_free(acc);

    DIST_CHECK(accel_accelerator_create(config, &acc));
    dl = make_loader(acc, &docs2);
    DIST_CHECK(accel_accelerator_load_state(acc, dir));
    take_tokens(dl, -1, resumed, sizeof resumed);
    DIST_EXPECT(strcmp(rest, resumed) == 0 && strlen(rest) > 0, "rank %d: resumed %s, uninterrupted %s", (int)rank,
                resumed, rest);
    printf("rank %d packing (%lld windows): pass 0 %s; resumed pass 1 %s\n", (int)rank, (long long)g_windows, packed,
           resumed);
    accel_dataloader_free(dl);
    accel_accelerator_free(acc);
    return 0;
}

int main(int argc, char **argv)
{
    /* Spec §6 (dispatch) and §4 (IterableDatasetShard) for range(21), batch 3, 2 processes. */
    static const char *const want[2][2] = {
        {"[0 1 2][6 7 8][12 13 14][18 19]", "[3 4 5][9 10 11][15 16 17][20 0]"},
        {"[0 1 2][6 7 8][12 13 14][18 19 20]", "[3 4 5][9 10 11][15 16 17][0 1 2]"}};
    const int dispatch = argc > 1 && strcmp(argv[1], "dispatch") == 0;
    const char *dir = argc > 2 ? argv[2] : "dist_datasets_ckpt";
    const char *config = dispatch ? "{}" : "{\"dataloader_config\": {\"dispatch_batches\": false}}";
    accel_accelerator_t *acc = NULL;
    accel_dataloader_t *dl;
    struct stream s1, s2;
    char pass0[512], rest[512], resumed[512];
    int32_t rank = 0, world = 0;

    if (argc > 1 && strcmp(argv[1], "map") == 0) return run_map(dir);
    if (argc > 1 && strncmp(argv[1], "pack_", 5) == 0)
        return run_packing(strcmp(argv[1], "pack_dispatch") == 0 ? "{}" : "{\"dataloader_config\": {\"dispatch_batches\": false}}",
                           strcmp(argv[1], "pack_dispatch") == 0, dir);
    DIST_CHECK(accel_accelerator_create(config, &acc));
    DIST_CHECK(accel_accelerator_get_process_index(acc, &rank));
    DIST_CHECK(accel_accelerator_get_num_processes(acc, &world));
    DIST_EXPECT(world == 2, "expected 2 processes, got %d", (int)world);
    s1.pos = s2.pos = 0;
    s1.mode = s2.mode = MODE_ROWS;
    s1.forbidden = s2.forbidden = dispatch && rank != 0;
    dl = make_loader(acc, &s1);
    take(dl, -1, pass0, sizeof pass0);
    DIST_EXPECT(strcmp(pass0, want[dispatch ? 0 : 1][rank]) == 0, "rank %d %s: pass 0 %s, expected %s", (int)rank,
                argv[1], pass0, want[dispatch ? 0 : 1][rank]);
    take(dl, 2, rest, sizeof rest); /* pass 1: 2 batches, then save */
    DIST_CHECK(accel_accelerator_save_state(acc, dir));
    take(dl, -1, rest, sizeof rest);
    accel_dataloader_free(dl);
    accel_accelerator_free(acc);

    DIST_CHECK(accel_accelerator_create(config, &acc));
    dl = make_loader(acc, &s2);
    DIST_CHECK(accel_accelerator_load_state(acc, dir));
    take(dl, -1, resumed, sizeof resumed);
    DIST_EXPECT(strcmp(rest, resumed) == 0, "rank %d %s: resumed %s, uninterrupted %s", (int)rank, argv[1], resumed, rest);
    if (!s2.forbidden) DIST_EXPECT(s2.pos == N, "rank %d: the stream ended at %lld", (int)rank, (long long)s2.pos);
    printf("rank %d %s: pass 0 %s; resumed pass 1 %s\n", (int)rank, argv[1], pass0, resumed);
    accel_dataloader_free(dl);
    accel_accelerator_free(acc);
    return 0;
}
