/*
 * The cost of checking a checkpoint on load (issue 42.3): load_state of the same save_state folder (~200 MB:
 * bench_mlp's 67 MB of weights and 134 MB of AdamW state) with verification (every file's CRC-32 against
 * accel_checksums.json; the default) and without (ACCEL_CHECKPOINT_VERIFY=0, read by the library on each call),
 * against dd reading the same files (`dd if=FILE of=/dev/null bs=1M`, one shell for all of them), interleaved,
 * page cache warm. Prints each round, then medians and the ratios.
 *
 *   bench_checkpoint_verify [DIR] [ROUNDS]     (DIR defaults to $TMPDIR or /tmp)
 */
#include "bench_common.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
    const char *base = argc > 1 ? argv[1] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    const int rounds = argc > 2 ? atoi(argv[2]) : 7;
    char dir[1024], dd[65536];
    snprintf(dir, sizeof dir, "%s/accel_bench_verify_%d", base, (int)getpid());
    accel_accelerator_t *acc = NULL;
    CHECK(accel_accelerator_create(NULL, &acc));
    BenchMlp m = bench_mlp(acc, 0);
    bench_mlp_step(acc, &m); /* AdamW's state exists */
    CHECK(accel_accelerator_save_state(acc, dir));

    /* dd over every file of the folder, in one shell. */
    double bytes = 0;
    size_t at = (size_t)snprintf(dd, sizeof dd, "sh -c '");
    DIR *d = opendir(dir);
    if (d == NULL) return 1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[2048];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        bytes += (double)st.st_size;
        at += (size_t)snprintf(dd + at, sizeof dd - at, "dd if=%s of=/dev/null bs=1M status=none; ", path);
    }
    closedir(d);
    snprintf(dd + at, sizeof dd - at, "'");
    printf("checkpoint: %s, %.1f MB\n", dir, bytes / 1e6);

    double *verify = calloc((size_t)rounds, sizeof(double)), *plain = calloc((size_t)rounds, sizeof(double)),
           *ddt = calloc((size_t)rounds, sizeof(double));
    CHECK(accel_accelerator_load_state(acc, dir)); /* warm: page cache, first-load allocations */
    for (int r = 0; r < rounds; ++r) {
        setenv("ACCEL_CHECKPOINT_VERIFY", "1", 1);
        double t0 = now();
        CHECK(accel_accelerator_load_state(acc, dir));
        verify[r] = now() - t0;
        setenv("ACCEL_CHECKPOINT_VERIFY", "0", 1);
        t0 = now();
        CHECK(accel_accelerator_load_state(acc, dir));
        plain[r] = now() - t0;
        t0 = now();
        if (system(dd) != 0) return 1;
        ddt[r] = now() - t0;
        printf("round %d: load verified %.3f s, load unverified %.3f s, dd read %.3f s\n", r, verify[r], plain[r], ddt[r]);
    }
    qsort(verify, (size_t)rounds, sizeof(double), cmp);
    qsort(plain, (size_t)rounds, sizeof(double), cmp);
    qsort(ddt, (size_t)rounds, sizeof(double), cmp);
    const double v = verify[rounds / 2], p = plain[rounds / 2], x = ddt[rounds / 2];
    printf("median: load verified %.3f s (%.0f MB/s), unverified %.3f s (%.0f MB/s), dd read %.3f s (%.0f MB/s)\n", v,
           bytes / 1e6 / v, p, bytes / 1e6 / p, x, bytes / 1e6 / x);
    printf("ratios: verified/dd %.2f, unverified/dd %.2f, verified/unverified %.2f (verification adds %.3f s)\n", v / x,
           p / x, v / p, v - p);
    /* A folder without accel's record (Accelerate's, DeepSpeed's): only the torch archives' zip CRC-32s are
       checked (optimizer.bin, the RNG and loader files; model.safetensors has no checksum to check). */
    char manifest[1100];
    snprintf(manifest, sizeof manifest, "%s/accel_checksums.json", dir);
    if (remove(manifest) != 0) return 1;
    setenv("ACCEL_CHECKPOINT_VERIFY", "1", 1);
    for (int r = 0; r < rounds; ++r) {
        double t0 = now();
        CHECK(accel_accelerator_load_state(acc, dir));
        verify[r] = now() - t0;
    }
    qsort(verify, (size_t)rounds, sizeof(double), cmp);
    printf("without accel_checksums.json (zip CRC-32s only): median %.3f s, %.2f x unverified, %.2f x dd\n",
           verify[rounds / 2], verify[rounds / 2] / p, verify[rounds / 2] / x);
    char rm[1100];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) return 1;
    bench_mlp_free(&m);
    accel_accelerator_free(acc);
    free(verify);
    free(plain);
    free(ddt);
    return 0;
}
