/*
 * Train an MLP on a synthetic classification set through accel's C API.
 *
 *   ./train_mlp ['<accelerator config JSON>']
 *   ./train_mlp '{"log_with": "tensorboard", "project_config": {"logging_dir": "runs"}}'   # runs/train_mlp/
 *
 * The data set is made here from a fixed seed: 4 Gaussian clusters in 16 dimensions. The main process
 * prints a line per epoch (with a progress bar while it runs when the output is a terminal) and logs the
 * loss and learning rate of every step to the trackers the config names; the program exits non-zero if
 * training accuracy stays below 95 %.
 */
#include <accel/accel.h>

#include "progress.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { NUM_SAMPLES = 2048, NUM_FEATURES = 16, NUM_CLASSES = 4, EPOCHS = 8 };

static int failed(accel_status_t st, const char *what)
{
    if (st == ACCEL_OK)
        return 0;
    fprintf(stderr, "train_mlp: %s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
    return 1;
}

/* A small deterministic generator so the data set is the same on every machine. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static double gaussian(void) { return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()); }

static void make_dataset(float *x, int64_t *y)
{
    double centers[NUM_CLASSES][NUM_FEATURES];
    for (int c = 0; c < NUM_CLASSES; ++c)
        for (int f = 0; f < NUM_FEATURES; ++f)
            centers[c][f] = 1.0 * gaussian();
    for (int i = 0; i < NUM_SAMPLES; ++i) {
        int c = i % NUM_CLASSES;
        y[i] = c;
        for (int f = 0; f < NUM_FEATURES; ++f)
            x[i * NUM_FEATURES + f] = (float)(centers[c][f] + gaussian());
    }
}

/* Fraction of samples whose arg-max logit is the label, with the model in eval mode. */
static int accuracy(accel_model_t *model, accel_tensor_t *features, const int64_t *labels, double *out)
{
    static float logits[NUM_SAMPLES * NUM_CLASSES];
    accel_tensor_t *outputs = NULL;
    int correct = 0;
    if (failed(accel_model_eval(model), "eval") ||
        failed(accel_model_forward_no_grad(model, features, &outputs), "forward") ||
        failed(accel_tensor_copy_to_buffer(outputs, logits, sizeof logits), "read logits")) {
        accel_tensor_free(outputs);
        return 1;
    }
    accel_tensor_free(outputs);
    for (int i = 0; i < NUM_SAMPLES; ++i) {
        int best = 0;
        for (int c = 1; c < NUM_CLASSES; ++c)
            if (logits[i * NUM_CLASSES + c] > logits[i * NUM_CLASSES + best])
                best = c;
        correct += best == labels[i];
    }
    *out = (double)correct / NUM_SAMPLES;
    return failed(accel_model_train(model), "train");
}

int main(int argc, char **argv)
{
    static float x[NUM_SAMPLES * NUM_FEATURES];
    static int64_t y[NUM_SAMPLES];
    const int64_t x_shape[2] = {NUM_SAMPLES, NUM_FEATURES}, y_shape[1] = {NUM_SAMPLES};
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_scheduler_t *sched = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *features = NULL, *labels = NULL;
    double acc_value = 0.0, final_loss = 0.0;
    int rc = 1;

    make_dataset(x, y);
    if (failed(accel_random_set_seed(42, false, false), "set_seed") ||
        failed(accel_accelerator_create(argc > 1 ? argv[1] : NULL, &acc), "create accelerator") ||
        failed(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, x_shape, 2, &features), "features") ||
        failed(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_INT64, y_shape, 1, &labels), "labels") ||
        failed(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [16, 64, 64, 4], \"activation\": \"relu\"}",
                                            &model), "model") ||
        failed(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.003}", &opt), "optimizer") ||
        failed(accel_dataloader_create_from_tensors(features, labels,
                                                    "{\"batch_size\": 64, \"shuffle\": true, \"seed\": 42}", &dl),
               "dataloader"))
        goto done;

    int64_t batches_per_epoch = 0, accumulation = 1;
    char sched_config[160];
    if (failed(accel_dataloader_get_length(dl, &batches_per_epoch), "length") ||
        failed(accel_accelerator_get_gradient_accumulation_steps(acc, &accumulation), "accumulation"))
        goto done;
    snprintf(sched_config, sizeof sched_config,
             "{\"type\": \"cosine\", \"num_warmup_steps\": 10, \"num_training_steps\": %lld}",
             (long long)(EPOCHS * batches_per_epoch / accumulation));
    if (failed(accel_scheduler_create(opt, sched_config, &sched), "scheduler") ||
        failed(accel_accelerator_prepare(acc, model, opt, dl, sched), "prepare"))
        goto done;

    int32_t processes = 1;
    char run_config[128];
    snprintf(run_config, sizeof run_config, "{\"lr\": 0.003, \"batch_size\": 64, \"epochs\": %d}", EPOCHS);
    if (failed(accel_accelerator_get_num_processes(acc, &processes), "num_processes") ||
        failed(accel_accelerator_init_trackers(acc, "train_mlp", run_config, NULL), "init_trackers"))
        goto done;
    const int show_bar = progress_enabled(acc);
    int64_t global_step = 0, batches_per_process = 0; /* after prepare: this process's share */
    if (failed(accel_dataloader_get_length(dl, &batches_per_process), "length"))
        goto done;
    for (int epoch = 1; epoch <= EPOCHS; ++epoch) {
        double start = progress_now(), loss_sum = 0.0, lr = 0.0;
        int64_t steps = 0;
        accel_batch_t *batch = NULL;
        while (!failed(accel_dataloader_next(dl, &batch), "next batch") && batch != NULL) {
            double loss = 0.0;
            char values[96];
            accel_status_t st = accel_accelerator_train_step(acc, model, opt, sched, batch, "cross_entropy", &loss);
            accel_batch_free(batch);
            if (failed(st, "train step") || failed(accel_scheduler_get_last_lr(sched, &lr), "lr"))
                goto done;
            snprintf(values, sizeof values, "{\"loss\": %.9g, \"lr\": %.9g}", loss, lr);
            if (failed(accel_accelerator_log(acc, values, global_step++), "log"))
                goto done;
            loss_sum += loss;
            ++steps;
            if (show_bar) {
                char label[32];
                snprintf(label, sizeof label, "epoch %d/%d", epoch, EPOCHS);
                progress_draw(label, steps, batches_per_process,
                              (double)(steps * 64 * processes) / (progress_now() - start), "samples",
                              loss_sum / (double)steps);
            }
        }
        if (show_bar)
            progress_clear(); /* the epoch's line replaces the bar */
        if (steps == 0 || failed(accel_scheduler_get_last_lr(sched, &lr), "lr") ||
            accuracy(model, features, y, &acc_value))
            goto done;
        char line[160];
        snprintf(line, sizeof line, "epoch %d/%d  loss %.4f  train accuracy %5.1f%%  lr %.5f  (%.2f s)", epoch, EPOCHS,
                 loss_sum / (double)steps, 100.0 * acc_value, lr, progress_now() - start);
        if (failed(accel_accelerator_print(acc, line), "print"))
            goto done;
        final_loss = loss_sum / (double)steps;
    }
    /* Full precision, so the examples in other languages (examples/<language>/) can be compared with it. */
    char final_line[64];
    snprintf(final_line, sizeof final_line, "final loss %.8f", final_loss);
    if (failed(accel_accelerator_print(acc, final_line), "print"))
        goto done;
    if (failed(accel_accelerator_end_training(acc), "end_training"))
        goto done;
    if (acc_value < 0.95) {
        fprintf(stderr, "train_mlp: training accuracy %.1f%% is below 95%%\n", 100.0 * acc_value);
        goto done;
    }
    rc = 0;

done:
    accel_scheduler_free(sched);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(features);
    accel_tensor_free(labels);
    accel_accelerator_free(acc);
    return rc;
}
