/* Automatic resume (accel_accelerator_load_latest_state) in one process: a program that saves every step and
 * calls load_latest_state after prepare trains from the start when there is no checkpoint, and, run again after
 * being stopped, continues from the newest complete checkpoint to the same final weights as a run never
 * stopped (bit for bit). A temp folder of a save killed midway and a newer folder missing its files are never
 * taken. Bad arguments and a config without automatic naming are refused. (Two processes: the elastic restart
 * test, tests/cli/elastic_restart.py.) */
#define _POSIX_C_SOURCE 200809L
#include "capi_helpers.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define NS 40
#define NIN 5
#define STEPS 7
#define MAXW 4096

static char g_root[512];

/* The program's own step counter, saved with every checkpoint (register_for_checkpointing) and restored by
 * the load: where to continue. */
static int g_done;
static char g_done_text[32];
static accel_status_t save_done(void *user_data, const uint8_t **out_data, size_t *out_len)
{
    (void)user_data;
    snprintf(g_done_text, sizeof g_done_text, "%d", g_done);
    *out_data = (const uint8_t *)g_done_text;
    *out_len = strlen(g_done_text);
    return ACCEL_OK;
}
static accel_status_t load_done(void *user_data, const uint8_t *data, size_t len)
{
    char text[32];
    (void)user_data;
    if (len == 0 || len >= sizeof text) return ACCEL_ERR_DATA_LOSS;
    memcpy(text, data, len);
    text[len] = '\0';
    g_done = atoi(text);
    return ACCEL_OK;
}

/* Trains an MLP with dropout and a shuffling loader (RNG, optimizer, scheduler and loader state all matter),
 * saving after every step; starts with load_latest_state. Stops after `stop_after` steps of this run (-1: runs
 * to STEPS). Returns the number of steps the run found already done; the final weights go to `w`. */
static int run_program(const char *project, uint64_t init_seed, int stop_after, float *w, size_t *nw)
{
    float x[NS * NIN];
    int64_t y[NS], shape1[1] = {NS};
    int32_t idx = -1;
    char cfg[1024];
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *sched = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *tx, *ty;
    bool found = true;
    int i, resumed_at, this_run = 0;
    for (i = 0; i < NS * NIN; ++i) x[i] = (float)sin(0.41 * (double)i + 0.3);
    for (i = 0; i < NS; ++i) y[i] = (int64_t)((i * 5) % 3);
    snprintf(cfg, sizeof cfg, "{\"project_config\": {\"project_dir\": \"%s\", \"automatic_checkpoint_naming\": true,"
                              " \"total_limit\": 3}}", project);
    CHECK_OK(accel_random_set_seed(init_seed, false, false));
    CHECK_OK(accel_accelerator_create(cfg, &acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [5, 16, 3], \"dropout\": 0.2}", &model));
    CHECK_OK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
    CHECK_OK(accel_scheduler_create(opt, "{\"type\": \"linear\", \"num_warmup_steps\": 2, \"num_training_steps\": 20}",
                                    &sched));
    tx = matrix_f32(x, NS, NIN);
    ty = tensor_i64(y, shape1, 1);
    CHECK_OK(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\": 8, \"shuffle\": true, \"seed\": 3}", &dl));
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    CHECK_OK(accel_accelerator_prepare(acc, model, opt, dl, sched));
    CHECK_OK(accel_accelerator_register_for_checkpointing(acc, save_done, load_done, NULL, &idx));
    g_done = 0;
    CHECK_OK(accel_accelerator_load_latest_state(acc, &found));
    resumed_at = g_done;
    CHECK(found == (resumed_at > 0));
    while (g_done < STEPS && (stop_after < 0 || this_run < stop_after)) {
        accel_batch_t *b = NULL;
        double loss = 0;
        CHECK_OK(accel_dataloader_next(dl, &b));
        if (b == NULL) continue; /* the next epoch */
        CHECK_OK(accel_accelerator_train_step(acc, model, opt, sched, b, "cross_entropy", &loss));
        accel_batch_free(b);
        ++g_done;
        ++this_run;
        CHECK_OK(accel_accelerator_save_state(acc, NULL));
    }
    *nw = read_params_f32(model, w, MAXW);
    accel_dataloader_free(dl);
    accel_scheduler_free(sched);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return resumed_at;
}

static void copy_file(const char *from, const char *to)
{
    static char buf[1 << 20];
    long n = read_file(from, buf, sizeof buf);
    FILE *f = fopen(to, "wb");
    CHECK(n > 0 && f != NULL);
    if (f == NULL) return;
    CHECK(fwrite(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
}

static void test_resume_bitwise(void)
{
    char ref_project[600], project[600], path[800], from[900], to[900];
    static float ref[MAXW], got[MAXW];
    size_t nref = 0, ngot = 0;
    int i;
    snprintf(ref_project, sizeof ref_project, "%s/uninterrupted", g_root);
    snprintf(project, sizeof project, "%s/interrupted", g_root);
    CHECK(run_program(ref_project, 5, -1, ref, &nref) == 0); /* fresh start: nothing found */
    CHECK(nref > 0);
    /* Stopped after 3 steps, then restarted (with another seed: everything must come from the checkpoint). */
    CHECK(run_program(project, 5, 3, got, &ngot) == 0);
    /* What a kill leaves: a temp folder of a save killed midway (its lock file not held: stale), and a newer
       published-looking folder with its files missing. Neither is taken. */
    snprintf(path, sizeof path, "%s/checkpoints/.checkpoint_3.accel-tmp", project);
    CHECK(mkdir(path, 0755) == 0);
    snprintf(from, sizeof from, "%s/checkpoints/checkpoint_2/model.safetensors", project);
    snprintf(to, sizeof to, "%s/model.safetensors", path);
    copy_file(from, to);
    snprintf(path, sizeof path, "%s/checkpoints/.checkpoint_3.accel-tmp.lock", project);
    {
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        if (f != NULL) fclose(f);
    }
    snprintf(path, sizeof path, "%s/checkpoints/checkpoint_9", project);
    CHECK(mkdir(path, 0755) == 0);
    snprintf(to, sizeof to, "%s/model.safetensors", path);
    copy_file(from, to);
    CHECK(run_program(project, 77, -1, got, &ngot) == 3);
    CHECK(ngot == nref && memcmp(ref, got, nref * sizeof(float)) == 0);
    printf("test_latest_state: resumed at step 3 of %d, final weights equal the uninterrupted run bit for bit\n", STEPS);
    /* Everything done: run again, nothing left to train, the same weights. */
    i = run_program(project, 77, -1, got, &ngot);
    if (i != STEPS) printf("third run resumed at %d\n", i);
    CHECK(i == STEPS);
    CHECK(ngot == nref && memcmp(ref, got, nref * sizeof(float)) == 0);
}

static void test_refusals(void)
{
    accel_accelerator_t *acc = NULL;
    bool found = true;
    CHECK_FAILS(accel_accelerator_load_latest_state(NULL, &found), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK(found == false);
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_FAILS(accel_accelerator_load_latest_state(acc, NULL), ACCEL_ERR_INVALID_ARGUMENT, "found_out");
    CHECK_FAILS(accel_accelerator_load_latest_state(acc, &found), ACCEL_ERR_FAILED_PRECONDITION,
                "automatic_checkpoint_naming");
    accel_accelerator_free(acc);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    char cmd[700];
    snprintf(g_root, sizeof g_root, "%s/accel_capi_latest_%d", tmp ? tmp : "/tmp", (int)getpid());
    mkdir(g_root, 0755);
    test_refusals();
    test_resume_bitwise();
    if (capi_failures == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
        CHECK(system(cmd) == 0);
    }
    return capi_report("test_latest_state");
}
