/* Asynchronous save_state ({"async": true}): the files equal a synchronous save of the same state although
 * training steps run while they are written; load_state and free wait for the write; a failure of the
 * background write (files larger than RLIMIT_FSIZE allows: EFBIG, as a full disk) is reported by
 * wait_for_checkpoint once, leaves no temp folder and keeps the previous checkpoint; bad options. */
#define _POSIX_C_SOURCE 200809L
#include "capi_helpers.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define NS 64
#define NIN 256
/* ~2.4 M parameters: ~29 MB of weights and AdamW state, so the write takes long enough for steps to run
 * while it goes on. */
#define WIDTHS "[256, 1024, 2048, 16]"

static char g_root[512];

typedef struct {
    accel_accelerator_t *acc;
    accel_model_t *model;
    accel_optimizer_t *opt;
    accel_dataloader_t *dl;
} Rig;

static void rig_make(Rig *r, const char *acc_json)
{
    static float x[NS * NIN];
    int64_t y[NS];
    int64_t shape1[1] = {NS};
    accel_tensor_t *tx, *ty;
    int i;
    memset(r, 0, sizeof *r);
    for (i = 0; i < NS * NIN; ++i) x[i] = (float)sin(0.37 * (double)i + 0.1);
    for (i = 0; i < NS; ++i) y[i] = (int64_t)((i * 7) % 16);
    CHECK_OK(accel_random_set_seed(42, false, false));
    CHECK_OK(accel_accelerator_create(acc_json, &r->acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": " WIDTHS "}", &r->model));
    CHECK_OK(accel_optimizer_create(r->model, "{\"type\": \"adamw\", \"lr\": 0.01}", &r->opt));
    tx = matrix_f32(x, NS, NIN);
    ty = tensor_i64(y, shape1, 1);
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 8, \"shuffle\": true, \"seed\": 7}", &r->dl));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    CHECK_OK(accel_accelerator_prepare(r->acc, r->model, r->opt, r->dl, NULL));
}

static void rig_free(Rig *r)
{
    accel_dataloader_free(r->dl);
    accel_optimizer_free(r->opt);
    accel_model_free(r->model);
    accel_accelerator_free(r->acc);
}

static void rig_train(Rig *r, int steps)
{
    int done = 0;
    while (done < steps) {
        accel_batch_t *b = NULL;
        double loss = 0;
        CHECK_OK(accel_dataloader_next(r->dl, &b));
        if (b == NULL) continue;
        CHECK_OK(accel_accelerator_train_step(r->acc, r->model, r->opt, NULL, b, "cross_entropy", &loss));
        accel_batch_free(b);
        ++done;
    }
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void rm_rf(const char *path)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "rm -rf %s failed\n", path);
}

/* Names in `dir` ending in ".accel-tmp". */
static int temp_folders(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (d == NULL) return 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len >= 10 && strcmp(e->d_name + len - 10, ".accel-tmp") == 0) ++n;
    }
    closedir(d);
    return n;
}

/* Every file of folder a is in b with the same bytes, and b has no others (`diff -r`). */
static int same_folder(const char *a, const char *b)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "diff -r '%s' '%s' > /dev/null", a, b);
    return system(cmd) == 0;
}

static void test_async_equals_sync(void)
{
    Rig r;
    char sync_dir[600], async_dir[600];
    char *written = NULL;
    int published_at_return;
    snprintf(sync_dir, sizeof sync_dir, "%s/sync", g_root);
    snprintf(async_dir, sizeof async_dir, "%s/async", g_root);
    rig_make(&r, NULL);
    rig_train(&r, 3);
    CHECK_OK(accel_accelerator_save_state(r.acc, sync_dir));
    CHECK_OK(accel_accelerator_save_state_with_options(r.acc, async_dir, "{\"async\": true}", &written));
    CHECK(written != NULL && strcmp(written, async_dir) == 0);
    accel_string_free(written);
    published_at_return = is_dir(async_dir);
    /* Training goes on while the files are written: the steps change every weight and the AdamW state. */
    rig_train(&r, 4);
    CHECK_OK(accel_accelerator_wait_for_checkpoint(r.acc));
    CHECK_OK(accel_accelerator_wait_for_checkpoint(r.acc)); /* nothing pending: OK at once */
    printf("the folder was %s when save_state returned\n", published_at_return ? "already published" : "still being written");
    CHECK(is_dir(async_dir));
    CHECK(temp_folders(g_root) == 0);
    CHECK(same_folder(sync_dir, async_dir));
    /* load_state waits for a save in progress: the checkpoint loads, equal to the one written synchronously. */
    CHECK_OK(accel_accelerator_save_state_with_options(r.acc, async_dir, "{\"async\": true}", NULL));
    CHECK_OK(accel_accelerator_save_state(r.acc, sync_dir));
    CHECK_OK(accel_accelerator_load_state(r.acc, async_dir));
    CHECK(same_folder(sync_dir, async_dir));
    rig_free(&r);

    /* free waits for the write: the folder is complete afterwards. */
    rm_rf(async_dir);
    rig_make(&r, NULL);
    CHECK_OK(accel_accelerator_save_state_with_options(r.acc, async_dir, "{\"async\": true}", NULL));
    rig_free(&r);
    CHECK(is_dir(async_dir) && temp_folders(g_root) == 0);
}

static void test_background_failure(void)
{
    Rig r;
    char dir[600], file[700];
    struct rlimit old, small;
    accel_status_t st;
    snprintf(dir, sizeof dir, "%s/fails", g_root);
    rig_make(&r, NULL);
    CHECK_OK(accel_accelerator_save_state(r.acc, dir)); /* the previous checkpoint, kept whatever happens */
    rig_train(&r, 1);
    /* Files above 64 KiB cannot be written (EFBIG, as a full disk): the folder is made, the weights fail. */
    signal(SIGXFSZ, SIG_IGN);
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = 64 << 10;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    CHECK_OK(accel_accelerator_save_state_with_options(r.acc, dir, "{\"async\": true}", NULL));
    st = accel_accelerator_wait_for_checkpoint(r.acc);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    CHECK(st == ACCEL_ERR_RESOURCE_EXHAUSTED);
    printf("background failure: %s: %s\n", accel_status_name(st), accel_last_error_message());
    CHECK(strstr(accel_last_error_message(), ".accel-tmp") != NULL); /* names the file it could not write */
    CHECK_OK(accel_accelerator_wait_for_checkpoint(r.acc));          /* reported once */
    CHECK(temp_folders(g_root) == 0);
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CHECK(access(file, R_OK) == 0);
    CHECK_OK(accel_accelerator_load_state(r.acc, dir)); /* the previous checkpoint, whole */
    /* The same failure reported by the next save_state instead (which then does not save). */
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    CHECK_OK(accel_accelerator_save_state_with_options(r.acc, dir, "{\"async\": true}", NULL));
    CHECK(accel_accelerator_save_state(r.acc, dir) == ACCEL_ERR_RESOURCE_EXHAUSTED);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    CHECK_OK(accel_accelerator_save_state(r.acc, dir));
    CHECK(temp_folders(g_root) == 0);
    rig_free(&r);
}

static void test_bad_input(void)
{
    Rig r;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/bad", g_root);
    CHECK(accel_accelerator_wait_for_checkpoint(NULL) == ACCEL_ERR_INVALID_ARGUMENT);
    rig_make(&r, NULL);
    CHECK(accel_accelerator_save_state_with_options(r.acc, dir, "{\"async\": \"yes\"}", NULL) == ACCEL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(accel_last_error_message(), "async") != NULL);
    CHECK(accel_accelerator_save_state_with_options(r.acc, dir, "{\"asynch\": true}", NULL) == ACCEL_ERR_INVALID_ARGUMENT);
    CHECK(!is_dir(dir));
    rig_free(&r);
}

int main(void)
{
    snprintf(g_root, sizeof g_root, "/tmp/accel-async-save-%d", (int)getpid());
    rm_rf(g_root);
    CHECK(mkdir(g_root, 0755) == 0);
    test_bad_input();
    test_async_equals_sync();
    test_background_failure();
    if (getenv("KEEP") == NULL) rm_rf(g_root);
    return capi_report("test_async_save");
}
