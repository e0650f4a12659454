/* Pipeline checkpoints' memory (issue 36): the peak growth of the resident set during save_model and save_state of
 * a pipeline model, per rank. The 8-block GPT of pp_build_memory.c (119 MB of parameters, tied head), built by stage,
 * trained one step with AdamW (so its state, twice the parameters, exists), then saved. "stage": save_model writes
 * each stage's shards, save_state gathers onto the main process's stage only (stage_checkpoint.hpp,
 * WholeStages::FirstStageOnly). "whole": the same with project_config.save_on_each_node, which keeps the way before
 * (every rank of the pp group borrows the whole model, and for save_state every parameter's optimizer state; on one
 * node only process 0 writes).
 * The peak is VmHWM after the save less the resident set before it (the heap trimmed, then the peak reset through
 * /proc/self/clear_refs).
 * "load": save_state, then load_state of that folder measured (each stage reads only its tensors and their state).
 * Usage: bench_pp_checkpoint_memory model|state|load OUT_DIR '<accelerator config JSON>' */
#include "bench_common.h"

#include <malloc.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s model|state|load OUT_DIR CONFIG_JSON\n", argv[0]);
        return 2;
    }
    const int model_only = strcmp(argv[1], "model") == 0;
    const char *spec = "{\"type\": \"gpt\", \"vocab_size\": 8192, \"n_positions\": 512, \"n_embd\": 512, \"n_layer\": 8,"
                       " \"n_head\": 8}";
    static int64_t tokens[4 * 16 + 1];
    const int64_t count = 4 * 16 + 1;
    for (int64_t i = 0; i < count; ++i) tokens[i] = (i * 7 + i / 5) % 8192;
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *stream = NULL;
    accel_batch_t *batch = NULL;
    int32_t rank = 0;
    double loss = 0.0;
    CHECK(accel_random_set_seed(1000, false, false));
    CHECK(accel_accelerator_create(argv[3], &acc));
    CHECK(accel_process_get_index(&rank));
    CHECK(accel_model_create_from_json(spec, &model));
    CHECK(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.001}", &opt));
    CHECK(accel_tensor_create(tokens, sizeof tokens, ACCEL_DTYPE_INT64, &count, 1, &stream));
    CHECK(accel_dataloader_create_from_tokens(stream, "{\"block_size\": 16, \"batch_size\": 4}", &dl));
    accel_tensor_free(stream);
    CHECK(accel_accelerator_prepare(acc, model, opt, dl, NULL));
    CHECK(accel_dataloader_next(dl, &batch));
    CHECK(accel_accelerator_train_step(acc, model, opt, NULL, batch, "causal_lm", &loss));
    accel_batch_free(batch);
    int64_t held = 0;
    CHECK(accel_model_get_parameter_numel(model, &held));
    malloc_trim(0); /* the step's freed gradients and activations back to the system: the save's growth is its own */
    const int load = strcmp(argv[1], "load") == 0;
    if (load) { /* load_state's growth: the folder saved first, outside the measured span */
        CHECK(accel_accelerator_save_state(acc, argv[2]));
        malloc_trim(0);
    }
    const long long before = rss_bytes();
    reset_peak_rss();
    if (model_only) CHECK(accel_accelerator_save_model(acc, model, argv[2], NULL));
    else if (load) CHECK(accel_accelerator_load_state(acc, argv[2]));
    else CHECK(accel_accelerator_save_state(acc, argv[2]));
    const long long peak = (long long)(status_mib("VmHWM:") * 1024 * 1024) - before;
    printf("rank %d save %s held_bytes %lld save_peak_bytes %lld\n", (int)rank, argv[1], (long long)held * 4, peak);
    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
