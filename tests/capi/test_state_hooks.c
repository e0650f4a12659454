/* accel/checkpoint.h, save_state / load_state pre-hooks: a save hook's file lands in the published checkpoint
 * (sync and async saves), a load hook reads it back from the folder load_state loads, hooks run in registration
 * order with the process index, a failing hook fails the call naming the hook (and publishes nothing), removal
 * stops a hook and releases its data once, the accelerator's end releases the rest; bad arguments. Also
 * accel_accelerator_save (named tensors into one safetensors file). */
#define _POSIX_C_SOURCE 200809L
#include "capi_test.h"

#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *text;      /* written by a save hook into <folder>/hook.txt; compared by a load hook */
    int calls, releases;
    int32_t last_index;
    char last_folder[512];
    accel_status_t fail_with; /* returned instead of ACCEL_OK when set */
    int *order, order_id;     /* appends order_id to *order's sequence */
} hook_data_t;

static int order_log[16], order_len;

static accel_status_t save_hook(void *user_data, const char *folder, int32_t process_index)
{
    hook_data_t *d = user_data;
    d->calls += 1;
    d->last_index = process_index;
    snprintf(d->last_folder, sizeof d->last_folder, "%s", folder);
    if (order_len < 16) order_log[order_len++] = d->order_id;
    if (d->fail_with != ACCEL_OK) {
        accel_callback_set_error("the hook refused");
        return d->fail_with;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/hook.txt", folder);
    FILE *f = fopen(path, "w");
    if (f == NULL) return ACCEL_ERR_PERMISSION_DENIED;
    fputs(d->text, f);
    fclose(f);
    return ACCEL_OK;
}

static accel_status_t load_hook(void *user_data, const char *folder, int32_t process_index)
{
    hook_data_t *d = user_data;
    d->calls += 1;
    d->last_index = process_index;
    snprintf(d->last_folder, sizeof d->last_folder, "%s", folder);
    char path[600], got[64] = "";
    snprintf(path, sizeof path, "%s/hook.txt", folder);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        accel_callback_set_error("hook.txt is missing");
        return ACCEL_ERR_NOT_FOUND;
    }
    if (fgets(got, sizeof got, f) == NULL) got[0] = '\0';
    fclose(f);
    return strcmp(got, d->text) == 0 ? ACCEL_OK : ACCEL_ERR_DATA_LOSS;
}

static void release(void *user_data) { ((hook_data_t *)user_data)->releases += 1; }

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int main(void)
{
    char dir[] = "/tmp/accel_state_hooks_XXXXXX", ckpt[128], path[256];
    if (mkdtemp(dir) == NULL) {
        CHECK(!"mkdtemp");
        return capi_report("test_state_hooks");
    }
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 2]}", &model));
    CHECK_OK(accel_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    CHECK_OK(accel_accelerator_prepare(acc, model, opt, NULL, NULL));

    hook_data_t first = {"first", 0, 0, -1, "", ACCEL_OK, NULL, 1}, second = {"second", 0, 0, -1, "", ACCEL_OK, NULL, 2};
    hook_data_t loader = {"second", 0, 0, -1, "", ACCEL_OK, NULL, 3}, failing = {"x", 0, 0, -1, "", ACCEL_OK, NULL, 4};
    int64_t h1 = 0, h2 = 0, h3 = 0, h4 = 0;
    int64_t bad = 99;
    CHECK_FAILS(accel_accelerator_register_save_state_pre_hook(acc, NULL, release, &first, &bad),
                ACCEL_ERR_INVALID_ARGUMENT, "hook");
    CHECK(bad == 0 && first.releases == 0); /* a failed registration keeps nothing (and releases nothing) */
    CHECK_FAILS(accel_accelerator_register_save_state_pre_hook(NULL, save_hook, release, &first, &bad),
                ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_register_load_state_pre_hook(acc, load_hook, release, &loader, NULL),
                ACCEL_ERR_INVALID_ARGUMENT, "out_handle");
    CHECK_OK(accel_accelerator_register_save_state_pre_hook(acc, save_hook, release, &first, &h1));
    CHECK_OK(accel_accelerator_register_save_state_pre_hook(acc, save_hook, release, &second, &h2));
    CHECK_OK(accel_accelerator_register_load_state_pre_hook(acc, load_hook, release, &loader, &h3));
    CHECK(h1 > 0 && h2 > h1 && h3 > h2);

    /* Both save hooks run, in order, on the folder being written; the second's file is the one kept. */
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    CHECK_OK(accel_accelerator_save_state(acc, ckpt));
    CHECK(first.calls == 1 && second.calls == 1 && loader.calls == 0);
    CHECK(order_len == 2 && order_log[0] == 1 && order_log[1] == 2);
    CHECK(first.last_index == 0);
    snprintf(path, sizeof path, "%s/hook.txt", ckpt);
    CHECK(exists(path));
    CHECK(!exists(first.last_folder)); /* the temporary folder, renamed into place */
    CHECK_OK(accel_accelerator_load_state(acc, ckpt));
    CHECK(loader.calls == 1 && loader.last_index == 0 && strcmp(loader.last_folder, ckpt) == 0);
    CHECK(first.calls == 1); /* save hooks do not run on load */

    /* A load hook that fails fails load_state with its status, naming it. */
    loader.text = "other";
    CHECK_FAILS(accel_accelerator_load_state(acc, ckpt), ACCEL_ERR_DATA_LOSS, "load_state: pre-hook 3 failed");
    loader.text = "second";

    /* Removal: the hook stops and is released at once; a second removal is NOT_FOUND. */
    CHECK_OK(accel_accelerator_remove_state_hook(acc, h1));
    CHECK(first.releases == 1);
    CHECK_FAILS(accel_accelerator_remove_state_hook(acc, h1), ACCEL_ERR_NOT_FOUND, "pre-hook");

    /* A failing save hook fails save_state on its status, naming the hook and its message; nothing published. */
    failing.fail_with = ACCEL_ERR_PERMISSION_DENIED;
    CHECK_OK(accel_accelerator_register_save_state_pre_hook(acc, save_hook, release, &failing, &h4));
    snprintf(ckpt, sizeof ckpt, "%s/refused", dir);
    char fragment[64];
    snprintf(fragment, sizeof fragment, "save_state: pre-hook %lld failed", (long long)h4);
    CHECK_FAILS(accel_accelerator_save_state(acc, ckpt), ACCEL_ERR_PERMISSION_DENIED, fragment);
    CHECK(strstr(accel_last_error_message(), "the hook refused") != NULL);
    CHECK(!exists(ckpt));
    CHECK_FAILS(accel_accelerator_save_state_with_options(acc, ckpt, "{\"async\": true}", NULL),
                ACCEL_ERR_PERMISSION_DENIED, fragment);
    CHECK_OK(accel_accelerator_wait_for_checkpoint(acc));
    CHECK(!exists(ckpt));
    CHECK_OK(accel_accelerator_remove_state_hook(acc, h4));
    CHECK(failing.releases == 1);

    /* An asynchronous save runs the hooks on the calling thread; their file is in the published folder. */
    snprintf(ckpt, sizeof ckpt, "%s/async", dir);
    CHECK_OK(accel_accelerator_save_state_with_options(acc, ckpt, "{\"async\": true}", NULL));
    CHECK(second.calls == 4 && first.calls == 1);
    CHECK_OK(accel_accelerator_wait_for_checkpoint(acc));
    snprintf(path, sizeof path, "%s/hook.txt", ckpt);
    CHECK(exists(path));
    CHECK_OK(accel_accelerator_load_state(acc, ckpt));
    CHECK(loader.calls == 3);

    /* accel_accelerator_save: named tensors into one safetensors file (header JSON, then the data). */
    {
        float w[6] = {1, 2, 3, 4, 5, 6};
        int64_t b[2] = {7, 8};
        const int64_t ws[2] = {2, 3}, bs[1] = {2};
        accel_tensor_t *tw = NULL, *tb = NULL;
        CHECK_OK(accel_tensor_create(w, sizeof w, ACCEL_DTYPE_FLOAT32, ws, 2, &tw));
        CHECK_OK(accel_tensor_create(b, sizeof b, ACCEL_DTYPE_INT64, bs, 1, &tb));
        const char *keys[2] = {"layer.weight", "steps"};
        const accel_tensor_t *ts[2] = {tw, tb};
        snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
        CHECK_OK(accel_accelerator_save(acc, keys, ts, 2, path));
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        if (f != NULL) {
            unsigned char buf[512];
            const size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            uint64_t header = 0;
            for (int i = 7; i >= 0; --i) header = header * 256 + buf[i];
            CHECK(n == 8 + header + sizeof w + sizeof b);
            char json[400] = "";
            if (header < sizeof json) memcpy(json, buf + 8, header);
            CHECK(strstr(json, "\"layer.weight\":{\"dtype\":\"F32\",\"shape\":[2,3]") != NULL);
            CHECK(strstr(json, "\"steps\":{\"dtype\":\"I64\",\"shape\":[2]") != NULL);
            CHECK(strstr(json, "\"format\":\"pt\"") != NULL);
        }
        const char *dup[2] = {"a", "a"};
        CHECK_FAILS(accel_accelerator_save(acc, dup, ts, 2, path), ACCEL_ERR_INVALID_ARGUMENT, "keys[1]: \"a\" appears twice");
        const accel_tensor_t *none[1] = {NULL};
        CHECK_FAILS(accel_accelerator_save(acc, keys, none, 1, path), ACCEL_ERR_INVALID_ARGUMENT, "tensors[0]");
        CHECK_FAILS(accel_accelerator_save(acc, keys, ts, 2, NULL), ACCEL_ERR_INVALID_ARGUMENT, "path");
        CHECK_FAILS(accel_accelerator_save(acc, NULL, ts, 2, path), ACCEL_ERR_INVALID_ARGUMENT, "keys");
        accel_tensor_free(tw);
        accel_tensor_free(tb);
    }

    /* The accelerator's end releases what is still registered, once each. */
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    CHECK(first.releases == 1 && second.releases == 1 && loader.releases == 1 && failing.releases == 1);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return capi_report("test_state_hooks");
}
