/* Pipeline parallelism's build memory (issue 36: no whole model on any rank): the peak growth of the resident set
 * while an 8-block GPT is built (n_embd 512, vocabulary 8192, 512 positions, tied head: 29.7 M parameters, 119 MB),
 * the parameter bytes the rank holds as built, and those it holds after prepare, in one process and per stage under
 * `accel launch` (bench/pp_build_memory.sh prints the table). "stage" builds the model while the accelerator lives
 * (each rank builds only its stage: src/parallel/pipeline/stage_init.hpp); "whole" builds it before the accelerator
 * exists (the whole model on every rank, cut at prepare: what every rank did before stage_init).
 * The peak is VmHWM after the build less the resident set before it (the peak reset through /proc/self/clear_refs).
 * Usage: bench_pp_build_memory stage|whole ['<accelerator config JSON>'] */
#include "bench_common.h"

int main(int argc, char **argv)
{
    const int whole = argc > 1 && strcmp(argv[1], "whole") == 0;
    const char *config = argc > 2 ? argv[2] : NULL;
    const char *spec = "{\"type\": \"gpt\", \"vocab_size\": 8192, \"n_positions\": 512, \"n_embd\": 512, \"n_layer\": 8,"
                       " \"n_head\": 8}";
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    int32_t rank = 0;
    CHECK(accel_random_set_seed(1000, false, false));
    if (!whole) CHECK(accel_accelerator_create(config, &acc));
    const long long before = rss_bytes();
    reset_peak_rss();
    CHECK(accel_model_create_from_json(spec, &model));
    const long long peak = (long long)(status_mib("VmHWM:") * 1024 * 1024) - before;
    int64_t built = 0, held = 0;
    CHECK(accel_model_get_parameter_numel(model, &built));
    if (whole) CHECK(accel_accelerator_create(config, &acc));
    CHECK(accel_process_get_index(&rank));
    CHECK(accel_accelerator_prepare(acc, model, NULL, NULL, NULL));
    CHECK(accel_model_get_parameter_numel(model, &held));
    printf("rank %d mode %s built_bytes %lld build_peak_bytes %lld prepared_bytes %lld\n", (int)rank,
           whole ? "whole" : "stage", (long long)built * 4, peak, (long long)held * 4);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
