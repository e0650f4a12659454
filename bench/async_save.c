/*
 * Asynchronous save benchmark (a program, not a test; see BENCHMARKS.md, "Asynchronous saves").
 *
 *   bench_async_save DIR ROUNDS STEPS_DURING ['<accelerator config JSON>']
 *
 * An MLP of four 2048 x 2048 layers with AdamW after one step (201 MB of model and optimizer state). Each
 * round: a synchronous save_state(DIR/sync) (the stall of a plain save); then save_state(DIR/async,
 * {"async": true}) (the stall of an asynchronous one), STEPS_DURING training steps while the files are
 * written, and wait_for_checkpoint (what was left of the write). Baselines measured in the same run: the
 * step time without a save, and memcpy of the checkpoint's bytes (what staging must do at least; the goal is
 * a stall no longer than that copy) into memory already mapped, and into fresh memory (page faults included).
 * Rank 0 prints medians and the ratios.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

static accel_accelerator_t *acc;
static BenchMlp mlp;

static double step(void) { return bench_mlp_step(acc, &mlp); }

/* Bytes of the regular files in `dir` and its sub-folders. */
static uint64_t folder_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t total = 0;
    char path[4096];
    struct stat st;
    if (d == NULL) return 0;
    while ((e = readdir(d)) != NULL) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &st) != 0) continue;
        if (S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
        else if (S_ISDIR(st.st_mode)) total += folder_bytes(path);
    }
    closedir(d);
    return total;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_async_save DIR ROUNDS STEPS_DURING [CONFIG]\n");
        return 2;
    }
    const char *dir = argv[1];
    const int rounds = atoi(argv[2]), during = atoi(argv[3]);
    const char *config = argc > 4 ? argv[4] : NULL;
    char sync_dir[4096], async_dir[4096];
    snprintf(sync_dir, sizeof sync_dir, "%s/sync", dir);
    snprintf(async_dir, sizeof async_dir, "%s/async", dir);
    int32_t rank = 0;
    CHECK(accel_random_set_seed(0, false, false));
    CHECK(accel_accelerator_create(config, &acc));
    CHECK(accel_accelerator_get_process_index(acc, &rank));
    int32_t world = 1;
    CHECK(accel_accelerator_get_num_processes(acc, &world));
    mlp = bench_mlp(acc, rank);
    step(); /* the optimizer has its state from here on */

    double *plain = malloc((size_t)(rounds * during + 1) * sizeof(double));
    double *loaded = malloc((size_t)(rounds * during + 1) * sizeof(double));
    double *sync_s = malloc((size_t)rounds * sizeof(double)), *stall = malloc((size_t)rounds * sizeof(double));
    double *rest = malloc((size_t)rounds * sizeof(double)), *copy = malloc((size_t)rounds * sizeof(double));
    double *warm = malloc((size_t)rounds * sizeof(double));
    for (int i = 0; i < rounds * during; ++i) plain[i] = step();
    uint64_t bytes = 0;
    double first = 0;
    for (int r = 0; r < rounds; ++r) {
        CHECK(accel_accelerator_wait_for_everyone(acc));
        double t0 = now();
        CHECK(accel_accelerator_save_state(acc, sync_dir));
        sync_s[r] = now() - t0;
        if (bytes == 0) bytes = folder_bytes(sync_dir) / (uint64_t)world; /* each process stages its share */
        /* The baseline: the same bytes copied once into fresh memory (page faults included, as staging's). */
        char *src = malloc(bytes), *dst = malloc(bytes);
        memset(src, r + 1, bytes);
        t0 = now();
        memcpy(dst, src, bytes);
        copy[r] = now() - t0;
        t0 = now();
        memcpy(dst, src, bytes); /* again: into memory already mapped */
        warm[r] = now() - t0;
        if (dst[bytes - 1] != (char)(r + 1)) return 1;
        free(src);
        free(dst);

        CHECK(accel_accelerator_wait_for_everyone(acc));
        t0 = now();
        CHECK(accel_accelerator_save_state_with_options(acc, async_dir, "{\"async\": true}", NULL));
        stall[r] = now() - t0;
        if (r == 0) first = stall[r];
        for (int s = 0; s < during; ++s) loaded[r * during + s] = step();
        t0 = now();
        CHECK(accel_accelerator_wait_for_checkpoint(acc));
        rest[r] = now() - t0;
    }
    if (rank == 0) {
        const double ms = 1e3;
        double sy = median(sync_s, rounds), st = median(stall, rounds), cp = median(copy, rounds), rs = median(rest, rounds);
        double wm = median(warm, rounds);
        double p = median(plain, rounds * during), l = median(loaded, rounds * during);
        printf("async_save: %d process(es), %.1f MB of checkpoint each, %d rounds, %d steps during each write\n", world,
               (double)bytes / 1e6, rounds, during);
        printf("  synchronous save_state      %8.1f ms (median)\n", sy * ms);
        printf("  async save_state stall      %8.1f ms = %.2f x the memcpy baseline (mapped memory), %.1f %% of the "
               "synchronous save (first round: %.1f ms, its staging memory fresh)\n",
               st * ms, st / wm, 100.0 * st / sy, first * ms);
        printf("  memcpy of the same bytes    %8.1f ms into mapped memory (baseline), %.1f ms into fresh memory\n",
               wm * ms, cp * ms);
        printf("  step time without a save    %8.1f ms; during the write %.1f ms (x%.2f)\n", p * ms, l * ms, l / p);
        printf("  wait_for_checkpoint after the steps %8.1f ms\n", rs * ms);
    }
    bench_mlp_free(&mlp);
    accel_accelerator_free(acc);
    return 0;
}
