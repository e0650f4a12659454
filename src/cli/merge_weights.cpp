// `accel merge-weights CHECKPOINT_DIR OUTPUT_PATH`: joins the shards that save_model wrote
// (model-0000i-of-0000N.safetensors + model.safetensors.index.json), or a SHARDED_STATE_DICT checkpoint's
// pieces, into one model.safetensors (or pytorch_model.bin), as `accelerate merge-weights` does.
#include "cli/commands.hpp"

#include <accel/checkpoint.h>
#include <accel/status.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace accel::cli {

namespace {
void merge_usage(FILE *to)
{
    std::fprintf(to, "usage: accel merge-weights [--unsafe_serialization] [--remove_checkpoint_dir] CHECKPOINT_DIR "
                     "OUTPUT_PATH\n\n"
                     "Joins sharded weights into one model.safetensors: a save_model folder with\n"
                     "model.safetensors.index.json, a save_state folder written with SHARDED_STATE_DICT (or its\n"
                     "pytorch_model_fsdp_0/), or one written under deepspeed_plugin (or its pytorch_model/).\n"
                     "OUTPUT_PATH is a folder, or a file name ending in .safetensors (.bin).\n\n"
                     "  --unsafe_serialization   write pytorch_model.bin (a torch.save pickle) instead\n"
                     "  --remove_checkpoint_dir  delete CHECKPOINT_DIR after a successful merge\n");
}
} // namespace

int merge_weights_main(int argc, char **argv)
{
    bool remove_input = false, unsafe = false;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
            merge_usage(stdout);
            return 0;
        }
        if (!std::strcmp(argv[i], "--remove_checkpoint_dir")) {
            remove_input = true;
        } else if (!std::strcmp(argv[i], "--unsafe_serialization")) {
            unsafe = true;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            std::fprintf(stderr, "accel merge-weights: unknown option %s\n\n", argv[i]);
            merge_usage(stderr);
            return 2;
        } else {
            positional.emplace_back(argv[i]);
        }
    }
    if (positional.size() != 2) {
        merge_usage(stderr);
        return 2;
    }
    // The library does the work (accel_checkpoint_merge_weights, Accelerate's merge_fsdp_weights).
    const std::string options = std::string("{\"safe_serialization\": ") + (unsafe ? "false" : "true") +
                                ", \"remove_checkpoint_dir\": " + (remove_input ? "true" : "false") + "}";
    char *written = nullptr;
    int64_t count = 0;
    accel_status_t st = accel_checkpoint_merge_weights(positional[0].c_str(), positional[1].c_str(), options.c_str(),
                                                       &written, &count);
    if (st != ACCEL_OK) {
        std::fprintf(stderr, "accel merge-weights: %s\n", accel_last_error_message());
        return 1;
    }
    std::printf("accel merge-weights: wrote %lld tensors to %s\n", static_cast<long long>(count), written);
    accel_string_free(written);
    return 0;
}

} // namespace accel::cli
