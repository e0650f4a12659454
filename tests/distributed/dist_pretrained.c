/* Pretrained folders on several processes (run_dist.py's "pretrained" scenario).
 *   dist_pretrained write SRC              one process: a seeded llama model saved with save_pretrained, in shards
 *   dist_pretrained write16 SRC DST        one process: SRC loaded as bfloat16 (torch_dtype) and saved to DST
 *   dist_pretrained load SRC OUT CONFIG [OPTIONS]
 *                                          every process: an accelerator of CONFIG, from_pretrained(SRC, OPTIONS) (under
 *                                          zero3_init_flag or FSDP's cpu_ram_efficient_loading partitioned: each
 *                                          process copies only its slices, and the model cannot be read whole
 *                                          before it is prepared; cpu_ram_efficient_loading leaves a model built
 *                                          from a JSON spec whole, as transformers reads it in from_pretrained
 *                                          alone), prepare with an
 *                                          optimizer, save_pretrained(OUT) from every process (gathered on the main
 *                                          process). run_dist.py checks that OUT holds SRC's tensors bit for bit. */
#include "dist_common.h"

#include <string.h>

static const char *kSpec = "{\"type\": \"llama\", \"vocab_size\": 11, \"hidden_size\": 8, \"intermediate_size\": 12,"
                           " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1}";

int main(int argc, char **argv)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *m = NULL;
    accel_optimizer_t *opt = NULL;
    accel_tensor_t *t = NULL;
    int32_t rank = 0;
    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        DIST_CHECK(accel_random_set_seed(5, false, false));
        DIST_CHECK(accel_model_create_from_json(kSpec, &m));
        DIST_CHECK(accel_model_save_pretrained(m, argv[2], "{\"max_shard_size\": 700}"));
        accel_model_free(m);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "write16") == 0) {
        DIST_CHECK(accel_model_from_pretrained(argv[2], "{\"torch_dtype\": \"bfloat16\"}", &m));
        DIST_CHECK(accel_model_save_pretrained(m, argv[3], "{\"max_shard_size\": 700}"));
        accel_model_free(m);
        return 0;
    }
    DIST_EXPECT((argc == 5 || argc == 6) && strcmp(argv[1], "load") == 0,
                "usage: dist_pretrained write SRC | write16 SRC DST | load SRC OUT CONFIG [OPTIONS]");
    DIST_CHECK(accel_accelerator_create(argv[4], &acc));
    DIST_CHECK(accel_accelerator_get_process_index(acc, &rank));
    DIST_CHECK(accel_model_from_pretrained(argv[2], argc == 6 ? argv[5] : "{\"strict\": true}", &m));
    if (strstr(argv[4], "zero3_init_flag") != NULL || strstr(argv[4], "cpu_ram_efficient_loading") != NULL) {
        accel_status_t st = accel_model_get_tensor(m, "model.embed_tokens.weight", &t);
        DIST_EXPECT(st == ACCEL_ERR_FAILED_PRECONDITION && t == NULL,
                    "a model loaded under %s is partitioned until prepared (got %s)", argv[4], accel_status_name(st));
        DIST_EXPECT(strstr(accel_last_error_message(), strstr(argv[4], "zero3") ? "zero3_init_flag"
                                                                                 : "cpu_ram_efficient_loading") != NULL,
                    "the message names the flag: %s", accel_last_error_message());
    }
    if (strstr(argv[4], "cpu_ram_efficient_loading") != NULL) {
        accel_model_t *built = NULL;
        DIST_CHECK(accel_model_create_from_json(kSpec, &built));
        DIST_CHECK(accel_model_get_tensor(built, "model.embed_tokens.weight", &t));
        accel_tensor_free(t);
        t = NULL;
        accel_model_free(built);
    }
    DIST_CHECK(accel_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
    DIST_CHECK(accel_accelerator_prepare(acc, m, opt, NULL, NULL));
    DIST_CHECK(accel_model_save_pretrained(m, argv[3], "{\"max_shard_size\": 700}"));
    DIST_CHECK(accel_accelerator_wait_for_everyone(acc));
    printf("pretrained: ok rank %d\n", (int)rank);
    accel_optimizer_free(opt);
    accel_model_free(m);
    accel_accelerator_free(acc);
    return 0;
}
