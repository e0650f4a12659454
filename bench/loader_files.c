/* The LM loader over a token file on disk (accel_dataloader_create_from_files: memory-mapped, each batch
 * pread from the file) against the same tokens in memory (accel_dataloader_create_from_tokens): batches/s of
 * the loader alone (shuffled windows, block_size 1024, batch 8), and steps/s of a small GPT fed by each.
 * Rounds alternate between the two; medians are printed with the ratio file / memory (goal >= 0.95).
 * It also times the two ways to take one window out of the file, pread into the batch and memcpy out of
 * the map, which is how the loader's read path was chosen (the map's copy can SIGBUS on a file cut short).
 *   bench_loader_files [rounds] [tokens_millions] [folder] [gpt_steps]   (gpt_steps 0: the loader only)
 * The file is written to `folder` (default /tmp) and left in the page cache (a warm corpus); deleted at exit. */
#include "bench_common.h"

#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { BLOCK = 1024, BATCH = 8, VOCAB = 4096 }; /* VOCAB: ids below it, and the GPT's vocabulary */

static accel_dataloader_t *file_loader(const char *path)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"format\": \"tokens\", \"files\": \"%s\", \"dtype\": \"uint16\", \"block_size\": %d, "
             "\"batch_size\": %d, \"shuffle\": true, \"seed\": 3, \"drop_last\": true}",
             path, BLOCK, BATCH);
    accel_dataloader_t *dl = NULL;
    CHECK(accel_dataloader_create_from_files(cfg, &dl));
    return dl;
}

static accel_dataloader_t *memory_loader(accel_tensor_t *tokens)
{
    char cfg[256];
    snprintf(cfg, sizeof cfg, "{\"block_size\": %d, \"batch_size\": %d, \"shuffle\": true, \"seed\": 3, \"drop_last\": true}",
             BLOCK, BATCH);
    accel_dataloader_t *dl = NULL;
    CHECK(accel_dataloader_create_from_tokens(tokens, cfg, &dl));
    return dl;
}

/* Batches/s over `n` batches (passes wrap around). */
static double loader_rate(accel_dataloader_t *dl, int n)
{
    double t0 = now();
    for (int i = 0; i < n;) {
        accel_batch_t *b = NULL;
        CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) continue;
        accel_batch_free(b);
        ++i;
    }
    return n / (now() - t0);
}

/* Steps/s of a small GPT (2 layers, n_embd 64, vocabulary VOCAB) fed by `dl`, over `n` steps. */
static double gpt_rate(accel_dataloader_t *dl, int n)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    CHECK(accel_accelerator_create(NULL, &acc));
    char spec[512];
    snprintf(spec, sizeof spec,
             "{\"type\": \"gpt\", \"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": 64, \"n_layer\": 2, "
             "\"n_head\": 4, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}",
             VOCAB, BLOCK);
    CHECK(accel_model_create_from_json(spec, &model));
    CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 3e-4}", &opt));
    CHECK(accel_accelerator_prepare(acc, model, opt, dl, NULL));
    double t0 = 0;
    for (int i = -1; i < n;) { /* step -1 warms up */
        if (i == 0 && t0 == 0) t0 = now();
        accel_batch_t *b = NULL;
        CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) continue;
        accel_tensor_t *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
        CHECK(accel_batch_get_inputs(b, &x));
        CHECK(accel_batch_get_labels(b, &y));
        CHECK(accel_model_forward(model, x, &logits));
        CHECK(accel_loss_compute("causal_lm", logits, y, &loss));
        CHECK(accel_accelerator_backward(acc, loss));
        CHECK(accel_optimizer_step(opt));
        CHECK(accel_optimizer_zero_grad(opt));
        accel_tensor_free(x);
        accel_tensor_free(y);
        accel_tensor_free(logits);
        accel_tensor_free(loss);
        accel_batch_free(b);
        ++i;
    }
    double rate = n / (now() - t0);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return rate;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ns per window read: pread into a buffer vs memcpy out of a read-only map, random windows. */
static void window_reads(const char *path, int64_t ntokens, double *pread_ns, double *map_ns)
{
    const size_t bytes = (size_t)ntokens * 2, w = (BLOCK + 1) * 2;
    int fd = open(path, O_RDONLY);
    const uint8_t *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (fd < 0 || map == MAP_FAILED) {
        perror(path);
        exit(1);
    }
    madvise((void *)map, bytes, MADV_RANDOM);
    uint8_t *buf = malloc(w);
    enum { N = 200000 };
    volatile uint8_t sink = 0;
    double t0 = now();
    for (int i = 0; i < N; ++i) {
        if (pread(fd, buf, w, (off_t)((next_random() % (uint64_t)(ntokens - BLOCK - 1)) * 2)) != (ssize_t)w) exit(1);
        sink ^= buf[0];
    }
    *pread_ns = (now() - t0) / N * 1e9;
    t0 = now();
    for (int i = 0; i < N; ++i) {
        memcpy(buf, map + (next_random() % (uint64_t)(ntokens - BLOCK - 1)) * 2, w);
        sink ^= buf[0];
    }
    *map_ns = (now() - t0) / N * 1e9;
    (void)sink;
    free(buf);
    munmap((void *)map, bytes);
    close(fd);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines as they come, also into a file */
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    const int64_t ntokens = (int64_t)(argc > 2 ? atof(argv[2]) : 32) * 1000000;
    const char *folder = argc > 3 ? argv[3] : "/tmp";
    const int gpt_steps = argc > 4 ? atoi(argv[4]) : 20;
    char path[512];
    snprintf(path, sizeof path, "%s/accel_bench_tokens_%d.bin", folder, (int)getpid());

    uint16_t *tok16 = malloc((size_t)ntokens * 2);
    int64_t *tok64 = malloc((size_t)ntokens * 8);
    for (int64_t i = 0; i < ntokens; ++i) tok64[i] = tok16[i] = (uint16_t)(next_random() % VOCAB);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(tok16, 2, (size_t)ntokens, f) != (size_t)ntokens || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    free(tok16);
    accel_tensor_t *tokens = NULL;
    int64_t shape[1] = {ntokens};
    CHECK(accel_tensor_create(tok64, (size_t)ntokens * 8, ACCEL_DTYPE_INT64, shape, 1, &tokens));
    free(tok64);

    double pread_ns, map_ns;
    window_reads(path, ntokens, &pread_ns, &map_ns);
    printf("one window of %d uint16 tokens out of a %.0f MB file (page cache): pread %.0f ns, memcpy from the map %.0f ns\n",
           BLOCK + 1, ntokens * 2 / 1e6, pread_ns, map_ns);

    accel_dataloader_t *df = file_loader(path), *dm = memory_loader(tokens);
    loader_rate(df, 200); /* warm-up */
    loader_rate(dm, 200);
    double *rf = malloc(sizeof(double) * (size_t)rounds), *rm = malloc(sizeof(double) * (size_t)rounds);
    for (int r = 0; r < rounds; ++r) {
        rf[r] = loader_rate(df, 3000);
        rm[r] = loader_rate(dm, 3000);
    }
    qsort(rf, (size_t)rounds, sizeof(double), cmp);
    qsort(rm, (size_t)rounds, sizeof(double), cmp);
    printf("loader, batch %d x block %d, shuffled: file %.0f batches/s (min %.0f, max %.0f), memory %.0f (min %.0f, max %.0f): "
           "ratio %.3f\n",
           BATCH, BLOCK, rf[rounds / 2], rf[0], rf[rounds - 1], rm[rounds / 2], rm[0], rm[rounds - 1], rf[rounds / 2] / rm[rounds / 2]);
    accel_dataloader_free(df);
    accel_dataloader_free(dm);

    for (int r = 0; r < rounds && gpt_steps > 0; ++r) {
        df = file_loader(path);
        dm = memory_loader(tokens);
        rf[r] = gpt_rate(df, gpt_steps);
        rm[r] = gpt_rate(dm, gpt_steps);
        accel_dataloader_free(df);
        accel_dataloader_free(dm);
    }
    qsort(rf, (size_t)rounds, sizeof(double), cmp);
    qsort(rm, (size_t)rounds, sizeof(double), cmp);
    if (gpt_steps > 0)
        printf("GPT step (2 layers, n_embd 64, vocabulary %d, batch %d x %d): file %.2f steps/s, memory %.2f: ratio %.3f\n", VOCAB, BATCH,
           BLOCK, rf[rounds / 2], rm[rounds / 2], rf[rounds / 2] / rm[rounds / 2]);
    free(rf);
    free(rm);
    accel_tensor_free(tokens);
    unlink(path);
    return 0;
}
