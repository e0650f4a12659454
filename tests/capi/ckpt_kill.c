/* The kill -9 trial's worker (driven by kill_trial.py): "save DIR MODE" saves in a loop until killed;
 * "check DIR MODE MIN_STEP" loads the newest checkpoint, checks it is complete and not older than MIN_STEP
 * (the last save the worker reported done), saves once more and checks no temp folder is left.
 * MODE "auto": project_dir DIR, automatic naming, total_limit 2; "fixed": output_dir DIR/ckpt.
 * "save DIR MODE async" saves asynchronously ({"async": true}): the blob is refilled while the files are
 * written, and "saved N" is printed once the next save_state (which waits for the previous one) returned.
 * The registered blob holds the step number and 2 MiB of a byte derived from it, so that a save takes long
 * enough to be killed midway and a torn blob shows. */
#include <accel/accel.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOB_LEN (2u << 20)

static int die(const char *what, accel_status_t st)
{
    fprintf(stderr, "ckpt_kill: %s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
    return 1;
}

static void fill(uint8_t *blob, uint32_t step)
{
    memcpy(blob, &step, sizeof step);
    memset(blob + sizeof step, (int)(step % 251u), BLOB_LEN - sizeof step);
}

/* Returns the step the blob holds, or -1 when it is torn. */
static int64_t step_of(const uint8_t *blob, size_t len)
{
    uint32_t step;
    if (len != BLOB_LEN) return -1;
    memcpy(&step, blob, sizeof step);
    for (size_t i = sizeof step; i < len; ++i)
        if (blob[i] != (uint8_t)(step % 251u)) return -1;
    return step;
}

/* Names ending in ".accel-tmp" in `dir` (missing folder: none). */
static int temp_folders(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len >= 10 && strcmp(e->d_name + len - 10, ".accel-tmp") == 0) {
            fprintf(stderr, "ckpt_kill: left behind: %s/%s\n", dir, e->d_name);
            ++n;
        }
    }
    closedir(d);
    return n;
}

struct blob {
    uint8_t *bytes;
    int64_t loaded_step; /* -2: nothing loaded; -1: torn */
};

static accel_status_t save_blob(void *user, const uint8_t **out, size_t *len)
{
    struct blob *b = user;
    *out = b->bytes;
    *len = BLOB_LEN;
    return ACCEL_OK;
}

static accel_status_t load_blob(void *user, const uint8_t *data, size_t len)
{
    struct blob *b = user;
    b->loaded_step = step_of(data, len);
    return ACCEL_OK;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "save") != 0 && strcmp(argv[1], "check") != 0) ||
        (strcmp(argv[3], "auto") != 0 && strcmp(argv[3], "fixed") != 0)) {
        fprintf(stderr, "usage: ckpt_kill save DIR auto|fixed [async] | check DIR auto|fixed MIN_STEP\n");
        return 2;
    }
    const char *dir = argv[2];
    const int automatic = strcmp(argv[3], "auto") == 0;
    const int async_save = argv[1][0] == 's' && argc > 4 && strcmp(argv[4], "async") == 0;
    const int64_t min_step = argv[1][0] == 'c' && argc > 4 ? atoll(argv[4]) : 0;
    char config[4096], fixed_dir[4096], ckpts[4096];
    snprintf(fixed_dir, sizeof fixed_dir, "%s/ckpt", dir);
    snprintf(ckpts, sizeof ckpts, "%s/checkpoints", dir);
    if (automatic)
        snprintf(config, sizeof config,
                 "{\"project_config\": {\"project_dir\": \"%s\", \"automatic_checkpoint_naming\": true, "
                 "\"total_limit\": 2}}",
                 dir);
    else
        snprintf(config, sizeof config, "{}");
    const char *target = automatic ? NULL : fixed_dir;

    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_status_t st;
    if ((st = accel_accelerator_create(config, &acc)) != ACCEL_OK) return die("create", st);
    if ((st = accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [64, 256, 64]}", &model)) != ACCEL_OK)
        return die("model", st);
    if ((st = accel_optimizer_create(model, "{\"type\": \"adam\", \"lr\": 0.001}", &opt)) != ACCEL_OK)
        return die("optimizer", st);
    if ((st = accel_accelerator_prepare(acc, model, opt, NULL, NULL)) != ACCEL_OK) return die("prepare", st);
    struct blob b = {malloc(BLOB_LEN), -2};
    if (b.bytes == NULL) return 1;
    int32_t index = -1;
    if ((st = accel_accelerator_register_for_checkpointing(acc, save_blob, load_blob, &b, &index)) != ACCEL_OK)
        return die("register", st);

    int rc = 0;
    if (argv[1][0] == 's') {
        /* A restarted run resumes from its newest checkpoint (so automatic numbering continues past it). */
        uint32_t first = 1;
        FILE *probe = fopen(automatic ? ckpts : fixed_dir, "r");
        if (probe != NULL) {
            fclose(probe);
            if ((st = accel_accelerator_load_state(acc, target)) != ACCEL_OK) return die("resume", st);
            if (b.loaded_step < 0) return die("resume: torn blob", ACCEL_ERR_DATA_LOSS);
            first = (uint32_t)b.loaded_step + 1;
        }
        /* Until killed: each save holds a new step; "saved N" is printed once save_state returned. */
        for (uint32_t step = first;; ++step) {
            fill(b.bytes, step);
            if (async_save) {
                if ((st = accel_accelerator_save_state_with_options(acc, target, "{\"async\": true}", NULL)) != ACCEL_OK)
                    return die("save_state (async)", st);
                /* This save waited for the previous one: that one is complete. The blob changes at once, as
                 * training would change the state while the files are written. */
                if (step > first) printf("saved %u\n", step - 1);
                memset(b.bytes, 0xEE, BLOB_LEN);
            } else {
                if ((st = accel_accelerator_save_state(acc, target)) != ACCEL_OK) return die("save_state", st);
                printf("saved %u\n", step);
            }
            fflush(stdout);
        }
    }
    /* check: the newest complete checkpoint loads, whole, and is not older than the last reported save. */
    if ((st = accel_accelerator_load_state(acc, target)) != ACCEL_OK) return die("load_state", st);
    if (b.loaded_step < 0 || b.loaded_step < min_step) {
        fprintf(stderr, "ckpt_kill: loaded step %lld, expected a whole blob of step >= %lld\n",
                (long long)b.loaded_step, (long long)min_step);
        rc = 1;
    }
    /* load_state with automatic naming removes what the killed save left... */
    if (automatic && temp_folders(ckpts) != 0) {
        fprintf(stderr, "ckpt_kill: load_state left the killed save's temp folder\n");
        rc = 1;
    }
    /* ...and so does the next save (in the fixed folder's parent too). */
    fill(b.bytes, (uint32_t)(b.loaded_step + 1));
    if ((st = accel_accelerator_save_state(acc, target)) != ACCEL_OK) return die("save_state after the kill", st);
    if (temp_folders(ckpts) + temp_folders(dir) != 0) rc = 1;
    if (rc == 0) printf("loaded step %lld (>= %lld), no temp folder left\n", (long long)b.loaded_step, (long long)min_step);
    free(b.bytes);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return rc;
}
