/* accel_dataloader_create_from_files through the C ABI: a uint16 token file gives the batches
 * accel_dataloader_create_from_tokens gives over the same tokens (shuffled, two passes), save_state positions
 * resume it, and the errors are statuses naming the key or the file (a missing file, a NULL config, a file
 * cut short while the loader reads it); with "eos_token_id", windows stop at document ends (two shards, a
 * document spanning both, short windows padded, an empty document skipped). */
#define _POSIX_C_SOURCE 200809L
#include "capi_helpers.h"

#include <stdint.h>
#include <unistd.h>

#define NTOK 4000
#define BLOCK 31

static char g_path[256];
static int64_t g_tokens[NTOK];

static void write_tokens(void)
{
    uint16_t t16[NTOK];
    FILE *f;
    int i;
    for (i = 0; i < NTOK; ++i) g_tokens[i] = t16[i] = (uint16_t)((i * 7919 + 5) % 50257);
    snprintf(g_path, sizeof g_path, "accel_capi_tokens_%d.bin", (int)getpid());
    f = fopen(g_path, "wb");
    CHECK(f != NULL && fwrite(t16, 2, NTOK, f) == NTOK);
    if (f != NULL) fclose(f);
}

static accel_dataloader_t *files_loader(void)
{
    char cfg[512];
    accel_dataloader_t *dl = NULL;
    snprintf(cfg, sizeof cfg,
             "{\"format\": \"tokens\", \"files\": \"%s\", \"dtype\": \"uint16\", \"block_size\": %d, "
             "\"batch_size\": 6, \"shuffle\": true, \"seed\": 11}",
             g_path, BLOCK);
    CHECK_OK(accel_dataloader_create_from_files(cfg, &dl));
    return dl;
}

/* The next batch's inputs and labels copied into `x`, `y` (capacity 6 * BLOCK); returns its size, 0 at the
 * end of a pass, -1 on error. */
static int64_t next_batch(accel_dataloader_t *dl, int64_t *x, int64_t *y)
{
    accel_batch_t *b = NULL;
    accel_tensor_t *in = NULL, *lab = NULL;
    int64_t size = 0;
    if (accel_dataloader_next(dl, &b) != ACCEL_OK) return -1;
    if (b == NULL) return 0;
    CHECK_OK(accel_batch_get_size(b, &size));
    CHECK_OK(accel_batch_get_inputs(b, &in));
    CHECK_OK(accel_batch_get_labels(b, &lab));
    CHECK_OK(accel_tensor_copy_to_buffer(in, x, (size_t)size * BLOCK * sizeof(int64_t)));
    CHECK_OK(accel_tensor_copy_to_buffer(lab, y, (size_t)size * BLOCK * sizeof(int64_t)));
    accel_tensor_free(in);
    accel_tensor_free(lab);
    accel_batch_free(b);
    return size;
}

static void test_same_batches_as_tokens(void)
{
    accel_dataloader_t *df = files_loader(), *dm = NULL;
    accel_tensor_t *t = NULL;
    int64_t shape[1] = {NTOK}, len_f = -1, len_m = -2;
    int64_t xf[6 * BLOCK], yf[6 * BLOCK], xm[6 * BLOCK], ym[6 * BLOCK];
    int pass, batches = 0;
    char cfg[200];
    CHECK_OK(accel_tensor_create(g_tokens, sizeof g_tokens, ACCEL_DTYPE_INT64, shape, 1, &t));
    snprintf(cfg, sizeof cfg, "{\"block_size\": %d, \"batch_size\": 6, \"shuffle\": true, \"seed\": 11}", BLOCK);
    CHECK_OK(accel_dataloader_create_from_tokens(t, cfg, &dm));
    CHECK_OK(accel_dataloader_get_length(df, &len_f));
    CHECK_OK(accel_dataloader_get_length(dm, &len_m));
    CHECK(len_f == len_m && len_f == ((NTOK - BLOCK - 1) / BLOCK + 1 + 5) / 6);
    for (pass = 0; pass < 2; ++pass) {
        for (;;) {
            int64_t nf = next_batch(df, xf, yf), nm = next_batch(dm, xm, ym);
            CHECK(nf == nm && nf >= 0);
            if (nf <= 0 || nf != nm) break;
            ++batches;
            CHECK(memcmp(xf, xm, (size_t)nf * BLOCK * sizeof(int64_t)) == 0);
            CHECK(memcmp(yf, ym, (size_t)nf * BLOCK * sizeof(int64_t)) == 0);
        }
    }
    CHECK(batches == 2 * len_f);
    accel_dataloader_free(df);
    accel_dataloader_free(dm);
    accel_tensor_free(t);
}

static void test_errors(void)
{
    accel_dataloader_t *dl = NULL;
    int64_t x[6 * BLOCK], y[6 * BLOCK];
    CHECK_FAILS(accel_dataloader_create_from_files(NULL, &dl), ACCEL_ERR_INVALID_ARGUMENT, "config_json");
    CHECK(dl == NULL);
    CHECK_FAILS(accel_dataloader_create_from_files("{\"format\": \"tokens\", \"files\": \"no_such_file.bin\", "
                                                   "\"dtype\": \"uint16\", \"block_size\": 4}", &dl),
                ACCEL_ERR_NOT_FOUND, "no_such_file.bin");
    /* A pattern under a folder that does not exist: glob cannot read it, which names the folder (fuzz.files_config
       found this answered as INTERNAL). */
    CHECK_FAILS(accel_dataloader_create_from_files("{\"format\": \"tokens\", \"files\": \"no_such_dir/?.bin\", "
                                                   "\"dtype\": \"uint16\", \"block_size\": 4}", &dl),
                ACCEL_ERR_NOT_FOUND, "cannot read folder \"no_such_dir\"");
    {
        /* A name longer than NAME_MAX: the path is unusable as given (was INTERNAL; fuzz.files_config). */
        char config[600], name[301];
        memset(name, 'n', 300);
        name[300] = '\0';
        snprintf(config, sizeof config, "{\"format\": \"tokens\", \"files\": \"%s\", \"dtype\": \"uint16\", \"block_size\": 4}", name);
        CHECK_FAILS(accel_dataloader_create_from_files(config, &dl), ACCEL_ERR_INVALID_ARGUMENT, "File name too long");
    }
    CHECK_FAILS(accel_dataloader_create_from_files("{\"format\": \"tokens\", \"files\": \"x.bin\", \"dtype\": \"u16\", "
                                                   "\"block_size\": 4}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "dtype");
    CHECK_FAILS(accel_dataloader_create_from_files("{\"format\": \"tokens\"}", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");

    /* Cut short while the loader reads it: the next batch reaching past the end fails naming the file. */
    dl = files_loader();
    CHECK(next_batch(dl, x, y) == 6);
    CHECK(truncate(g_path, 64) == 0);
    {
        accel_batch_t *b = NULL;
        accel_status_t st = ACCEL_OK;
        int i;
        for (i = 0; i < 10 && st == ACCEL_OK; ++i) {
            st = accel_dataloader_next(dl, &b);
            accel_batch_free(b);
            b = NULL;
        }
        CHECK(st == ACCEL_ERR_DATA_LOSS);
        CHECK(strstr(accel_last_error_message(), g_path) != NULL);
    }
    accel_dataloader_free(dl);
}

/* Documents ending with EOS 0 over two uint8 shards (document A spans both): A = 1..9 0 (10 tokens), B = 11 12 0,
 * a lone EOS (no label: no window), D = 21..26 (no EOS: the stream's end ends it). */
static const uint8_t k_docs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 11, 12, 0, 0, 21, 22, 23, 24, 25, 26};

/* The whole pass of a document-window loader (one batch of at most 8) against `want_x` / `want_y`, rows of 4. */
static void check_document_windows(const char *extra, int64_t rows, const int64_t *want_x, const int64_t *want_y)
{
    char cfg[512];
    accel_dataloader_t *dl = NULL;
    int64_t x[8 * 4], y[8 * 4], len = 0;
    snprintf(cfg, sizeof cfg,
             "{\"format\": \"tokens\", \"files\": \"accel_docs_%d_*.bin\", \"dtype\": \"uint8\", \"block_size\": 4, "
             "\"batch_size\": 8, \"eos_token_id\": 0, \"pad_token_id\": 99%s}",
             (int)getpid(), extra);
    CHECK_OK(accel_dataloader_create_from_files(cfg, &dl));
    CHECK_OK(accel_dataloader_get_length(dl, &len));
    CHECK(len == 1);
    {
        accel_batch_t *b = NULL;
        accel_tensor_t *in = NULL, *lab = NULL;
        int64_t n = 0;
        CHECK_OK(accel_dataloader_next(dl, &b));
        CHECK_OK(accel_batch_get_size(b, &n));
        CHECK(n == rows);
        CHECK_OK(accel_batch_get_inputs(b, &in));
        CHECK_OK(accel_batch_get_labels(b, &lab));
        CHECK_OK(accel_tensor_copy_to_buffer(in, x, (size_t)rows * 4 * sizeof(int64_t)));
        CHECK_OK(accel_tensor_copy_to_buffer(lab, y, (size_t)rows * 4 * sizeof(int64_t)));
        CHECK(memcmp(x, want_x, (size_t)rows * 4 * sizeof(int64_t)) == 0);
        CHECK(memcmp(y, want_y, (size_t)rows * 4 * sizeof(int64_t)) == 0);
        accel_tensor_free(in);
        accel_tensor_free(lab);
        accel_batch_free(b);
    }
    accel_dataloader_free(dl);
}

static void test_document_boundaries(void)
{
    /* stride 4 (= block_size): A's windows start at 0, 4 and 8 (the last one short), B's at 0, D's at 0 and 4. */
    static const int64_t x4[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 99, 99, 99, 11, 12, 99, 99, 21, 22, 23, 24, 25, 99, 99, 99};
    static const int64_t y4[] = {2, 3, 4, 5, 6, 7, 8, 9, 0, -100, -100, -100, 12, 0, -100, -100, 22, 23, 24, 25, 26, -100, -100, -100};
    /* stride 2: A's at 0, 2, 4 (whole) and 6 (reaching its end), B's at 0, D's at 0 and 2 (reaching its end). */
    static const int64_t x2[] = {1, 2, 3, 4, 3, 4, 5, 6, 5, 6, 7, 8, 7, 8, 9, 99, 11, 12, 99, 99, 21, 22, 23, 24, 23, 24, 25, 99};
    static const int64_t y2[] = {2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9, 8, 9, 0, -7, 12, 0, -7, -7, 22, 23, 24, 25, 24, 25, 26, -7};
    char name[2][64];
    accel_dataloader_t *dl = NULL;
    int i;
    for (i = 0; i < 2; ++i) {
        FILE *f;
        snprintf(name[i], sizeof name[i], "accel_docs_%d_%d.bin", (int)getpid(), i);
        f = fopen(name[i], "wb");
        CHECK(f != NULL && fwrite(k_docs + 7 * i, 1, i == 0 ? 7 : sizeof k_docs - 7, f) == (i == 0 ? 7 : sizeof k_docs - 7));
        if (f != NULL) fclose(f);
    }
    check_document_windows("", 6, x4, y4);
    check_document_windows(", \"stride\": 2, \"label_pad_token_id\": -7", 7, x2, y2);

    CHECK_FAILS(accel_dataloader_create_from_files("{\"format\": \"tokens\", \"files\": \"x.bin\", \"dtype\": \"uint8\", "
                                                   "\"block_size\": 4, \"pad_token_id\": 1}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "pad_token_id: only with \"eos_token_id\"");
    CHECK_FAILS(accel_dataloader_create_from_files("{\"format\": \"npy\", \"features\": \"x.npy\", \"eos_token_id\": 0}", &dl),
                ACCEL_ERR_INVALID_ARGUMENT, "eos_token_id: only for token streams");
    {
        /* Every token an EOS: no document has a label. */
        char cfg[300];
        snprintf(cfg, sizeof cfg, "{\"format\": \"tokens\", \"files\": \"%s\", \"dtype\": \"uint8\", \"block_size\": 4, "
                                  "\"eos_token_id\": 0}", name[0]);
        FILE *f = fopen(name[0], "wb");
        CHECK(f != NULL && fwrite("\0\0\0\0\0\0\0\0", 1, 8, f) == 8);
        if (f != NULL) fclose(f);
        CHECK_FAILS(accel_dataloader_create_from_files(cfg, &dl), ACCEL_ERR_INVALID_ARGUMENT, "no document of at least 2 tokens");
        /* A window longer than the whole stream (8 + 13 tokens now) is refused as without eos_token_id. */
        snprintf(cfg, sizeof cfg, "{\"format\": \"tokens\", \"files\": \"accel_docs_%d_*.bin\", \"dtype\": \"uint8\", "
                                  "\"block_size\": 30, \"eos_token_id\": 0}", (int)getpid());
        CHECK_FAILS(accel_dataloader_create_from_files(cfg, &dl), ACCEL_ERR_INVALID_ARGUMENT, "do not make one sequence");
    }
    CHECK(dl == NULL);
    unlink(name[0]);
    unlink(name[1]);
}

int main(void)
{
    write_tokens();
    test_same_batches_as_tokens();
    test_errors();
    test_document_boundaries();
    unlink(g_path);
    return capi_report("test_dataloader_files");
}
