/* The accel side of tests/python/accelerate_interchange.py: a small training run that saves and resumes
 * checkpoints, printing each loss exactly (C99 %a) so that the script can compare runs bit for bit, with the
 * real Accelerate's run of the same training (accelerate_peer.py) and with itself.
 *
 *   ckpt_interchange_driver save   DIR STEPS FINAL [options]   train STEPS steps, save_state(DIR), train STEPS more
 *   ckpt_interchange_driver resume DIR STEPS FINAL [options]   load_state(DIR), train STEPS steps
 *   options: --safe (model.safetensors; default pytorch_model.bin, which Accelerate 0.2x reads),
 *            --skip N (after load_state skip N batches: a folder without loader state, as Accelerate 0.2x
 *            writes), --accum N (gradient_accumulation_steps), --bf16 (mixed_precision), --custom (a
 *            registered object: the number of micro-batches seen, as JSON text {"count": n}), --auto (DIR is
 *            the project_dir of automatic checkpoint naming with total_limit 2: three saves, at STEPS/3, 2*STEPS/3
 *            and STEPS steps; resume loads the newest with load_state(NULL))
 *
 * Every process prints "loss|cont <rank> <step> <value>" lines (cont: after the checkpoint), and with --custom
 * "custom <rank> <count>"; the main process saves the final weights into the folder FINAL (save_model). Run it
 * under `accel launch -n 2` for two processes. The model has dropout (the CPU generator matters), the loader
 * shuffles (its seed and position matter), the optimizer is Adam with a linear schedule (their state matters). */
#include <accel/accel.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(accel_status_t st, const char *what)
{
    if (st != ACCEL_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
        exit(1);
    }
}

/* The registered object: its state is JSON text, which Accelerate's side reads with json.loads. */
typedef struct {
    long count;
    char text[64];
} counter_t;

static accel_status_t counter_save(void *user, const uint8_t **data, size_t *len)
{
    counter_t *c = user;
    snprintf(c->text, sizeof c->text, "{\"count\": %ld}", c->count);
    *data = (const uint8_t *)c->text;
    *len = strlen(c->text);
    return ACCEL_OK;
}

/* Takes the bytes accel's own save wrote, or Accelerate's {"count": n} dict handed over as JSON text. */
static accel_status_t counter_load(void *user, const uint8_t *data, size_t len)
{
    counter_t *c = user;
    char text[64];
    if (len >= sizeof text) return ACCEL_ERR_INVALID_ARGUMENT;
    memcpy(text, data, len);
    text[len] = '\0';
    const char *v = strstr(text, "\"count\"");
    if (v == NULL || (v = strchr(v, ':')) == NULL) return ACCEL_ERR_INVALID_ARGUMENT;
    c->count = strtol(v + 1, NULL, 10);
    return ACCEL_OK;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s save|resume DIR STEPS FINAL [--safe] [--skip N] [--accum N] [--bf16] [--custom] [--auto]\n",
                argv[0]);
        return 2;
    }
    const int save = strcmp(argv[1], "save") == 0;
    const char *dir = argv[2];
    const int steps = atoi(argv[3]);
    const char *final_dir = argv[4];
    int safe = 0, skip = 0, accum = 1, bf16 = 0, custom = 0, autonaming = 0;
    for (int a = 5; a < argc; ++a) {
        if (strcmp(argv[a], "--safe") == 0) safe = 1;
        else if (strcmp(argv[a], "--bf16") == 0) bf16 = 1;
        else if (strcmp(argv[a], "--custom") == 0) custom = 1;
        else if (strcmp(argv[a], "--auto") == 0) autonaming = 1;
        else if (strcmp(argv[a], "--skip") == 0 && a + 1 < argc) skip = atoi(argv[++a]);
        else if (strcmp(argv[a], "--accum") == 0 && a + 1 < argc) accum = atoi(argv[++a]);
        else {
            fprintf(stderr, "unknown option %s\n", argv[a]);
            return 2;
        }
    }

    /* A different seed on resume: everything random must come from the checkpoint. */
    check(accel_random_set_seed(save ? 1234 : 999, true, false), "set_seed");
    char project[1024] = "";
    if (autonaming)
        snprintf(project, sizeof project,
                 ", \"project_config\": {\"project_dir\": \"%s\", \"automatic_checkpoint_naming\": true, "
                 "\"total_limit\": 2}",
                 dir);
    char config[1280];
    snprintf(config, sizeof config, "{\"gradient_accumulation_steps\": %d, \"mixed_precision\": \"%s\"%s}", accum,
             bf16 ? "bf16" : "no", project);
    accel_accelerator_t *acc;
    check(accel_accelerator_create(config, &acc), "accelerator");
    int32_t rank;
    check(accel_accelerator_get_process_index(acc, &rank), "rank");

    enum { N = 96, IN = 6, OUT = 3 };
    static float x[N * IN];
    static int64_t y[N];
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < IN; ++j) x[i * IN + j] = (float)sin(0.37 * i + 0.91 * j);
        y[i] = (i * 7) % OUT;
    }
    int64_t xs[2] = {N, IN}, ys[1] = {N};
    accel_tensor_t *tx, *ty;
    check(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &tx), "x");
    check(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, ys, 1, &ty), "y");
    accel_model_t *model;
    check(accel_model_create_from_json("{\"type\":\"mlp\",\"widths\":[6,16,3],\"dropout\":0.25}", &model), "model");
    accel_optimizer_t *opt;
    check(accel_optimizer_create(model, "{\"type\":\"adam\",\"lr\":0.01}", &opt), "optimizer");
    accel_scheduler_t *sched;
    check(accel_scheduler_create(opt, "{\"type\":\"linear\",\"num_warmup_steps\":2,\"num_training_steps\":40}", &sched),
          "scheduler");
    accel_dataloader_t *dl;
    check(accel_dataloader_create_from_tensors(tx, ty, "{\"batch_size\":4,\"shuffle\":true,\"seed\":77}", &dl), "loader");
    check(accel_accelerator_prepare(acc, model, opt, dl, sched), "prepare");
    counter_t counter = {0, ""};
    int32_t index;
    if (custom) check(accel_accelerator_register_for_checkpointing(acc, counter_save, counter_load, &counter, &index),
                      "register_for_checkpointing");

    if (!save) {
        check(accel_accelerator_load_state(acc, autonaming ? NULL : dir), "load_state");
        if (skip > 0) {
            accel_dataloader_t *skipped;
            check(accel_dataloader_skip_first_batches(dl, skip, &skipped), "skip_first_batches");
            accel_dataloader_free(dl);
            dl = skipped;
        }
    }
    int step = 0;
    const int total = save ? 2 * steps : steps;
    while (step < total) {
        accel_batch_t *b;
        check(accel_dataloader_next(dl, &b), "next");
        if (b == NULL) continue; /* next pass */
        double loss;
        check(accel_accelerator_train_step(acc, model, opt, sched, b, "cross_entropy", &loss), "train_step");
        accel_batch_free(b);
        ++counter.count;
        const int after = !save || step >= steps;
        printf("%s %d %d %a\n", after ? "cont" : "loss", (int)rank, save && after ? step - steps : step, loss);
        ++step;
        if (save && (step == steps || (autonaming && (3 * step == steps || 3 * step == 2 * steps)))) {
            check(accel_accelerator_save_state_with_options(acc, autonaming ? NULL : dir,
                                                            safe ? "{\"safe_serialization\":true}"
                                                                 : "{\"safe_serialization\":false}",
                                                            NULL),
                  "save_state");
            printf("saved\n");
        }
    }
    check(accel_accelerator_save_model(acc, model, final_dir, NULL), "save_model");
    if (custom) printf("custom %d %ld\n", (int)rank, counter.count);
    fflush(stdout);
    accel_dataloader_free(dl);
    accel_scheduler_free(sched);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(tx);
    accel_tensor_free(ty);
    accel_accelerator_free(acc);
    return 0;
}
