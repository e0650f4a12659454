/*
 * dist_state_dict MODE CONFIG OUT_DIR
 *
 * MODE state_dict: accel_accelerator_get_state_dict on P processes under CONFIG (DDP, fsdp_plugin, ZeRO 1-3).
 *   Right after prepare, process 0 (and every process where rank0_only is off: DDP, ZeRO-1/2) receives the
 *   one-process state dict of the same initial weights bit for bit (an unprepared copy built from the same
 *   seed); the other processes receive an empty one under FSDP and ZeRO-3, as Accelerate. After training on
 *   different data per process, {"rank0_only": false} gives every process the same parameters (all-gathered
 *   bytes compared), equal bit for bit to the values read inside summon_full_params (or directly, unsharded), and
 *   training goes on. unwrap false: DDP's keys with "module.", the model's own keys otherwise. Process 0 writes
 *   the trained state dict to OUT_DIR/get_state_dict/model.safetensors (accel_accelerator_save) and every process calls
 *   save_model into OUT_DIR/save_model; run_dist.py compares the two files bit for bit.
 * MODE hooks: save_state / load_state pre-hooks and accel_accelerator_save on P processes: each process's save
 *   hook runs with its process_index and the files they add are all in the published folder (sync and async
 *   saves); each load hook runs with its process_index and reads every process's file; accel_accelerator_save
 *   writes on the main process only (a path per process: only process 0's file exists afterwards).
 * Prints "<MODE>: ok rank r of P" per process.
 */
#define _POSIX_C_SOURCE 200809L
#include "dist_common.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

static const char *kSpec = "{\"type\": \"sequential\", \"layers\": ["
                           "{\"type\": \"linear\", \"in_features\": 6, \"out_features\": 32},"
                           "{\"type\": \"batch_norm\", \"num_features\": 32},"
                           "{\"type\": \"tanh\"},"
                           "{\"type\": \"linear\", \"in_features\": 32, \"out_features\": 3}]}";

/* The bytes of `t` appended to *buf (grown as needed); returns the new length. */
static size_t append_bytes(const accel_tensor_t *t, unsigned char **buf, size_t len)
{
    size_t n = 0;
    DIST_CHECK(accel_tensor_get_nbytes(t, &n));
    *buf = realloc(*buf, len + n + 1);
    DIST_EXPECT(*buf != NULL, "out of memory");
    DIST_CHECK(accel_tensor_copy_to_buffer(t, *buf + len, n));
    return len + n;
}

static size_t count_of(const accel_state_dict_t *sd)
{
    size_t n = 0;
    DIST_CHECK(accel_state_dict_get_count(sd, &n));
    return n;
}

/* Every entry of `sd` against `ref`'s state dict in order: the key (after `prefix`), dtype and bytes. */
static void expect_equal_to_model(const accel_state_dict_t *sd, const accel_model_t *ref, const char *prefix,
                                  const char *what)
{
    size_t want = 0, i;
    DIST_CHECK(accel_model_get_state_dict_size(ref, &want));
    DIST_EXPECT(count_of(sd) == want, "%s: %zu entries, the model has %zu", what, count_of(sd), want);
    for (i = 0; i < want; ++i) {
        const char *key = NULL, *ref_key = NULL;
        accel_tensor_t *t = NULL, *r = NULL;
        unsigned char *a = NULL, *b = NULL;
        accel_dtype_t da = -1, db = -2;
        DIST_CHECK(accel_state_dict_get_key(sd, i, &key));
        DIST_CHECK(accel_model_get_state_dict_key(ref, i, &ref_key));
        DIST_EXPECT(strncmp(key, prefix, strlen(prefix)) == 0 && strcmp(key + strlen(prefix), ref_key) == 0,
                    "%s: key %zu is \"%s\", expected \"%s%s\"", what, i, key, prefix, ref_key);
        DIST_CHECK(accel_state_dict_get_tensor(sd, i, &t));
        DIST_CHECK(accel_model_get_tensor(ref, ref_key, &r));
        DIST_CHECK(accel_tensor_get_dtype(t, &da));
        DIST_CHECK(accel_tensor_get_dtype(r, &db));
        const size_t na = append_bytes(t, &a, 0), nb = append_bytes(r, &b, 0);
        DIST_EXPECT(da == db && na == nb && memcmp(a, b, na) == 0, "%s: \"%s\" differs from the model's", what, key);
        free(a);
        free(b);
        accel_tensor_free(t);
        accel_tensor_free(r);
    }
}

static void train_step(accel_accelerator_t *acc, accel_model_t *m, accel_optimizer_t *opt, int32_t rank, int step)
{
    float x[8 * 6], y[8 * 3];
    int i;
    for (i = 0; i < 8 * 6; ++i) x[i] = (float)sin(0.37 * (double)i + rank + 0.1 * step);
    for (i = 0; i < 8 * 3; ++i) y[i] = (float)cos(0.21 * (double)i - rank);
    int64_t xs[2] = {8, 6}, ys[2] = {8, 3};
    accel_tensor_t *tx = NULL, *ty = NULL, *out = NULL, *loss = NULL;
    DIST_CHECK(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &tx));
    DIST_CHECK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_FLOAT32, ys, 2, &ty));
    DIST_CHECK(accel_model_forward(m, tx, &out));
    DIST_CHECK(accel_loss_compute("mse", out, ty, &loss));
    DIST_CHECK(accel_accelerator_backward(acc, loss));
    DIST_CHECK(accel_optimizer_step(opt));
    DIST_CHECK(accel_optimizer_zero_grad(opt));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    accel_tensor_free(out);
    accel_tensor_free(loss);
}

static void run_state_dict(const char *config, const char *out_dir, int32_t r, int32_t p)
{
    const int sharded = strstr(config, "_plugin") != NULL;
    const int rank0_only = strstr(config, "fsdp_plugin") != NULL || strstr(config, "\"zero_stage\": 3") != NULL;
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL, *ref = NULL;
    accel_optimizer_t *opt = NULL;
    accel_state_dict_t *sd = NULL;
    DIST_CHECK(accel_accelerator_create(config, &acc));
    DIST_CHECK(accel_random_set_seed(11, false, false));
    DIST_CHECK(accel_model_create_from_json(kSpec, &m));
    DIST_CHECK(accel_random_set_seed(11, false, false));
    DIST_CHECK(accel_model_create_from_json(kSpec, &ref)); /* the one-process model: never prepared */
    DIST_CHECK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.05}", &opt));
    DIST_CHECK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));

    /* 1. The initial weights, as Accelerate hands them out. */
    DIST_CHECK(accel_accelerator_get_state_dict(acc, m, NULL, &sd));
    if (rank0_only && r != 0)
        DIST_EXPECT(count_of(sd) == 0, "rank0_only: process %d received %zu entries", r, count_of(sd));
    else
        expect_equal_to_model(sd, ref, "", "initial state dict");
    accel_state_dict_free(sd);

    /* 2. Trained on different data per process: every process the same whole state dict. */
    train_step(acc, m, opt, r, 0);
    train_step(acc, m, opt, r, 1);
    DIST_CHECK(accel_accelerator_get_state_dict(acc, m, "{\"rank0_only\": false}", &sd));
    if (sharded) DIST_CHECK(accel_accelerator_summon_full_params_begin(acc, m));
    expect_equal_to_model(sd, m, "", "trained state dict");
    if (sharded) DIST_CHECK(accel_accelerator_summon_full_params_end(acc, m));
    {
        /* The parameters (listed first): batch_norm's running statistics are each process's own, as in PyTorch. */
        unsigned char *mine = NULL;
        size_t len = 0, i, params = 0;
        accel_object_list_t *all = NULL;
        DIST_CHECK(accel_model_get_num_parameters(m, &params));
        for (i = 0; i < params; ++i) {
            accel_tensor_t *t = NULL;
            DIST_CHECK(accel_state_dict_get_tensor(sd, i, &t));
            len = append_bytes(t, &mine, len);
            accel_tensor_free(t);
        }
        DIST_CHECK(accel_accelerator_gather_object(acc, mine, len, &all));
        for (int32_t q = 0; q < p; ++q) {
            const uint8_t *data = NULL;
            size_t n = 0;
            DIST_CHECK(accel_object_list_get_item(all, (size_t)q, &data, &n));
            DIST_EXPECT(n == len && memcmp(data, mine, len) == 0, "process %d's state dict differs from process %d's", q, r);
        }
        accel_object_list_free(all);
        free(mine);
    }
    /* Process 0 writes it; save_model writes the same weights (compared by run_dist.py). */
    {
        size_t n = count_of(sd), i;
        const char **keys = calloc(n, sizeof *keys);
        accel_tensor_t **tensors = calloc(n, sizeof *tensors);
        char path[1024];
        DIST_EXPECT(keys != NULL && tensors != NULL, "out of memory");
        for (i = 0; i < n; ++i) {
            DIST_CHECK(accel_state_dict_get_key(sd, i, &keys[i]));
            DIST_CHECK(accel_state_dict_get_tensor(sd, i, &tensors[i]));
        }
        snprintf(path, sizeof path, "%s/get_state_dict/model.safetensors", out_dir); /* a folder run_dist.py reads */
        DIST_CHECK(accel_accelerator_save(acc, keys, (const accel_tensor_t *const *)tensors, n, path));
        snprintf(path, sizeof path, "%s/save_model", out_dir);
        DIST_CHECK(accel_accelerator_save_model(acc, m, path, NULL));
        for (i = 0; i < n; ++i) accel_tensor_free(tensors[i]);
        free(tensors);
        free(keys);
    }
    accel_state_dict_free(sd);

    /* 3. unwrap false: DDP names its module's keys "module.*"; sharded models keep the model's own. */
    DIST_CHECK(accel_accelerator_get_state_dict(acc, m, "{\"unwrap\": false, \"rank0_only\": false}", &sd));
    if (sharded) DIST_CHECK(accel_accelerator_summon_full_params_begin(acc, m));
    expect_equal_to_model(sd, m, sharded || p == 1 ? "" : "module.", "unwrap false");
    if (sharded) DIST_CHECK(accel_accelerator_summon_full_params_end(acc, m));
    accel_state_dict_free(sd);

    train_step(acc, m, opt, r, 2); /* the model trains on after being gathered */
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_model_free(ref);
    accel_accelerator_free(acc);
}

/* ---- hooks ---- */

typedef struct {
    int32_t rank, num_processes;
    int calls;
} hook_state_t;

static accel_status_t save_hook(void *user_data, const char *folder, int32_t process_index)
{
    hook_state_t *h = user_data;
    char path[1024];
    h->calls += 1;
    if (process_index != h->rank) {
        accel_callback_set_error("save hook: called with another process's index");
        return ACCEL_ERR_INTERNAL;
    }
    snprintf(path, sizeof path, "%s/hook_%d.txt", folder, process_index);
    FILE *f = fopen(path, "w");
    if (f == NULL) return ACCEL_ERR_PERMISSION_DENIED;
    fprintf(f, "written by process %d", process_index);
    fclose(f);
    return ACCEL_OK;
}

/* Every process's file is in the folder load_state reads, with its writer's index. */
static accel_status_t load_hook(void *user_data, const char *folder, int32_t process_index)
{
    hook_state_t *h = user_data;
    h->calls += 1;
    if (process_index != h->rank) {
        accel_callback_set_error("load hook: called with another process's index");
        return ACCEL_ERR_INTERNAL;
    }
    for (int32_t q = 0; q < h->num_processes; ++q) {
        char path[1024], got[64] = "", want[64];
        snprintf(path, sizeof path, "%s/hook_%d.txt", folder, q);
        snprintf(want, sizeof want, "written by process %d", q);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            accel_callback_set_error("load hook: a process's hook file is missing");
            return ACCEL_ERR_NOT_FOUND;
        }
        if (fgets(got, sizeof got, f) == NULL) got[0] = '\0';
        fclose(f);
        if (strcmp(got, want) != 0) return ACCEL_ERR_DATA_LOSS;
    }
    return ACCEL_OK;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void expect_hook_files(const char *dir, int32_t p, const char *what)
{
    for (int32_t q = 0; q < p; ++q) {
        char path[1024];
        snprintf(path, sizeof path, "%s/hook_%d.txt", dir, q);
        DIST_EXPECT(exists(path), "%s: %s is missing", what, path);
    }
}

static void run_hooks(const char *config, const char *out_dir, int32_t r, int32_t p)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    hook_state_t saves = {r, p, 0}, loads = {r, p, 0};
    int64_t handle = 0;
    char dir[1024], path[1024];
    char *written = NULL;
    DIST_CHECK(accel_accelerator_create(config, &acc));
    DIST_CHECK(accel_random_set_seed(11, false, false));
    DIST_CHECK(accel_model_create_from_json(kSpec, &m));
    DIST_CHECK(accel_optimizer_create(m, "{\"type\": \"adamw\", \"lr\": 0.05}", &opt));
    DIST_CHECK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    DIST_CHECK(accel_accelerator_register_save_state_pre_hook(acc, save_hook, NULL, &saves, &handle));
    DIST_CHECK(accel_accelerator_register_load_state_pre_hook(acc, load_hook, NULL, &loads, &handle));

    snprintf(dir, sizeof dir, "%s/ckpt_sync", out_dir);
    DIST_CHECK(accel_accelerator_save_state(acc, dir));
    DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
    expect_hook_files(dir, p, "save_state");
    DIST_CHECK(accel_accelerator_load_state(acc, dir));

    snprintf(dir, sizeof dir, "%s/ckpt_async", out_dir);
    DIST_CHECK(accel_accelerator_save_state_with_options(acc, dir, "{\"async\": true}", &written));
    accel_string_free(written);
    DIST_CHECK(accel_accelerator_wait_for_checkpoint(acc)); /* collective: published everywhere afterwards */
    expect_hook_files(dir, p, "async save_state");
    DIST_CHECK(accel_accelerator_load_state(acc, dir));
    DIST_EXPECT(saves.calls == 2 && loads.calls == 2, "hooks ran %d (save) and %d (load) times, expected 2 each",
                saves.calls, loads.calls);

    /* accel_accelerator_save: the main process writes, the others return at once. */
    {
        accel_tensor_t *t = NULL;
        const char *key = "0.weight";
        DIST_CHECK(accel_model_get_tensor(m, key, &t));
        snprintf(path, sizeof path, "%s/save_%d.safetensors", out_dir, r);
        DIST_CHECK(accel_accelerator_save(acc, &key, (const accel_tensor_t *const *)&t, 1, path));
        accel_tensor_free(t);
        DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
        for (int32_t q = 0; q < p; ++q) {
            snprintf(path, sizeof path, "%s/save_%d.safetensors", out_dir, q);
            DIST_EXPECT(exists(path) == (q == 0), "%s %s", path, q == 0 ? "is missing" : "was written by a process other than the main one");
        }
    }
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
}

int main(int argc, char **argv)
{
    DIST_EXPECT(argc == 4, "usage: dist_state_dict state_dict|hooks CONFIG OUT_DIR");
    int32_t r = -1, p = 0;
    DIST_CHECK(accel_process_get_index(&r));
    DIST_CHECK(accel_process_get_count(&p));
    if (strcmp(argv[1], "state_dict") == 0) run_state_dict(argv[2], argv[3], r, p);
    else if (strcmp(argv[1], "hooks") == 0) run_hooks(argv[2], argv[3], r, p);
    else DIST_EXPECT(0, "unknown mode %s", argv[1]);
    printf("%s: ok rank %d of %d\n", argv[1], r, p);
    return 0;
}
