/* Generation of a llama dispatched with disk offload (accel_model_dispatch): tokens/s and the peak resident set
 * while generating, in one mode per process (dispatch_disk.sh runs all three and dd):
 *
 *   bench_dispatch_disk MODE FOLDER [HIDDEN LAYERS INTERMEDIATE VOCAB TOKENS]
 *   MODE: memory (the whole model in memory), half (every other block and the head on disk), disk (everything)
 *
 * Prints one line: the model's bytes, the bytes read from the folder per token (the disk modules' weights), tokens/s
 * of greedy generation (batch 1, 8-token prompt, KV cache) and the resident set: before generating and its peak
 * while generating (VmHWM after writing 5 to clear_refs), in MiB. A 2-token generation first sets up what any run
 * would (BLAS buffers), outside the measurement.
 *
 * With BENCH_CHECKPOINT=DIR the model is built on meta (empty_init) and its weights come from DIR (a save_pretrained
 * folder) through accel_model_load_checkpoint_and_dispatch (memory: accel_model_load_checkpoint): the whole model
 * is never in memory, as Accelerate's load_checkpoint_and_dispatch does it; the line then also gives the load's time
 * and the peak RSS from the start to before generating. MODE "save" builds the model and writes DIR.
 *
 * With BENCH_QUANTIZE=KEYS too (a BnbQuantizationConfig's keys without braces, e.g. "\"load_in_8bit\": true"), the
 * load is load_and_quantize_model instead (accel_model_quantize with weights_location, and the mode's device_map and
 * offload_folder): the disk modules' quantized weights are written to FOLDER as they are quantized. The sizes printed
 * stay the float model's. */
#define _XOPEN_SOURCE 700
#include "bench_common.h"

#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s memory|half|disk FOLDER [HIDDEN LAYERS INTERMEDIATE VOCAB TOKENS]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2];
    const long hidden = argc > 3 ? atol(argv[3]) : 1024, layers = argc > 4 ? atol(argv[4]) : 16;
    const long inter = argc > 5 ? atol(argv[5]) : 2816, vocab = argc > 6 ? atol(argv[6]) : 32000;
    const int tokens = argc > 7 ? atoi(argv[7]) : 16;
    char spec[512], map[8192], options[1200], gen[64];
    snprintf(spec, sizeof spec,
             "{\"type\": \"llama\", \"vocab_size\": %ld, \"hidden_size\": %ld, \"intermediate_size\": %ld,"
             " \"num_hidden_layers\": %ld, \"num_attention_heads\": %ld, \"max_position_embeddings\": 512}",
             vocab, hidden, inter, layers, hidden / 64);
    const double block = (4.0 * hidden * hidden + 3.0 * hidden * inter + 2.0 * hidden) * 4;
    const double ends = (2.0 * vocab * hidden + hidden) * 4;
    double on_disk = 0;
    size_t n = 0;
    long i;
    accel_model_t *m = NULL;
    const char *checkpoint = getenv("BENCH_CHECKPOINT");
    const int from_checkpoint = checkpoint != NULL && checkpoint[0] != '\0';
    double load_s = 0, load_peak = 0;
    CHECK(accel_random_set_seed(1, false, false));
    if (strcmp(mode, "save") == 0) {
        CHECK(accel_model_create_from_json(spec, &m));
        CHECK(accel_model_save_pretrained(m, dir, NULL));
        accel_model_free(m);
        return 0;
    }
    if (from_checkpoint) {
        size_t len = strlen(spec);
        snprintf(spec + len - 1, sizeof spec - len + 1, ", \"empty_init\": true}");
    }
    CHECK(accel_model_create_from_json(spec, &m));
    CHECK(accel_model_eval(m));
    if (strcmp(mode, "disk") == 0) {
        snprintf(map, sizeof map, "{\"\": \"disk\"}");
        on_disk = layers * block + ends;
    } else if (strcmp(mode, "half") == 0) {
        n += (size_t)snprintf(map + n, sizeof map - n, "{\"lm_head\": \"disk\"");
        on_disk = vocab * hidden * 4.0;
        for (i = 0; i < layers; i += 2) {
            n += (size_t)snprintf(map + n, sizeof map - n, ", \"model.layers.%ld\": \"disk\"", i);
            on_disk += block;
        }
        snprintf(map + n, sizeof map - n, ", \"\": \"cpu\"}");
    } else if (strcmp(mode, "memory") != 0) {
        fprintf(stderr, "MODE: memory, half or disk\n");
        return 2;
    }
    const char *quantize = getenv("BENCH_QUANTIZE");
    if (from_checkpoint && quantize != NULL && quantize[0] != '\0') {
        static char config[10000];
        const double t0 = now();
        if (on_disk > 0)
            snprintf(config, sizeof config, "{%s, \"weights_location\": \"%s\", \"device_map\": %s, \"offload_folder\": \"%s\"}",
                     quantize, checkpoint, map, dir);
        else
            snprintf(config, sizeof config, "{%s, \"weights_location\": \"%s\"}", quantize, checkpoint);
        CHECK(accel_model_quantize(m, config));
        load_s = now() - t0;
        load_peak = status_mib("VmHWM:");
    } else if (from_checkpoint) {
        static char load_options[9400];
        const double t0 = now();
        if (on_disk > 0) {
            snprintf(load_options, sizeof load_options, "{\"device_map\": %s, \"offload_folder\": \"%s\"}", map, dir);
            CHECK(accel_model_load_checkpoint_and_dispatch(m, checkpoint, load_options));
        } else {
            CHECK(accel_model_load_checkpoint(m, checkpoint, NULL));
        }
        load_s = now() - t0;
        load_peak = status_mib("VmHWM:");
    } else if (on_disk > 0) {
        snprintf(options, sizeof options, "{\"offload_dir\": \"%s\"}", dir);
        CHECK(accel_model_dispatch(m, map, options));
    }
    int64_t prompt[8] = {3, 1, 4, 1, 5, 9, 2, 6}, shape[2] = {1, 8};
    accel_tensor_t *x = NULL, *g = NULL;
    CHECK(accel_tensor_create(prompt, sizeof prompt, ACCEL_DTYPE_INT64, shape, 2, &x));
    CHECK(accel_model_generate(m, x, "{\"max_new_tokens\": 2}", &g));
    accel_tensor_free(g);
    const double before = status_mib("VmRSS:");
    reset_peak_rss();
    snprintf(gen, sizeof gen, "{\"max_new_tokens\": %d}", tokens);
    const double t0 = now();
    CHECK(accel_model_generate(m, x, gen, &g));
    const double dt = now() - t0;
    const double peak = status_mib("VmHWM:");
    /* the prompt's forward plus one per new token but the last */
    printf("dispatch %-6s model %.0f MiB, read per forward %.0f MiB: %.2f tokens/s (%d tokens in %.2f s), "
           "RSS before %.0f MiB, peak while generating %.0f MiB (+%.0f)\n",
           mode, (layers * block + ends) / 1048576.0, on_disk / 1048576.0, tokens / dt, tokens, dt, before, peak,
           peak - before);
    if (from_checkpoint)
        printf("dispatch %-6s built on meta, loaded from the checkpoint%s in %.1f s, peak RSS up to generating %.0f MiB\n",
               mode, quantize != NULL && quantize[0] != '\0' ? " (load_and_quantize_model)" : "", load_s, load_peak);
    accel_tensor_free(g);
    accel_tensor_free(x);
    accel_model_free(m);
    return 0;
}
