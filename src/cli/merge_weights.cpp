// `accel merge-weights CHECKPOINT_DIR OUTPUT_PATH`: joins the shards that save_model wrote
// (model-0000i-of-0000N.safetensors + model.safetensors.index.json) into one model.safetensors, as
// `accelerate merge-weights` does for sharded checkpoints. OUTPUT_PATH is a folder (model.safetensors is
// written into it) or a file name ending in .safetensors. Works on bytes: every dtype passes through.
#include "common/files.hpp"
#include "checkpointing/merge_weights.hpp"
#include "cli/commands.hpp"
#include "common/error.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace accel::cli {

namespace {
void merge_usage(FILE *to)
{
    std::fprintf(to, "usage: accel merge-weights [--remove_checkpoint_dir] CHECKPOINT_DIR OUTPUT_PATH\n\n"
                     "Joins sharded weights into one model.safetensors: a save_model folder with\n"
                     "model.safetensors.index.json, or a save_state folder written with SHARDED_STATE_DICT (or its\n"
                     "pytorch_model_fsdp_0/). OUTPUT_PATH is a folder, or a file name ending in .safetensors.\n\n"
                     "  --remove_checkpoint_dir  delete CHECKPOINT_DIR after a successful merge\n"
                     "  --unsafe_serialization   (pickle output) not supported: safetensors only\n");
}
} // namespace

int merge_weights_main(int argc, char **argv)
{
    bool remove_input = false;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
            merge_usage(stdout);
            return 0;
        }
        if (!std::strcmp(argv[i], "--remove_checkpoint_dir")) {
            remove_input = true;
        } else if (!std::strcmp(argv[i], "--unsafe_serialization")) {
            std::fprintf(stderr, "accel merge-weights: --unsafe_serialization (pytorch_model.bin output) is not yet "
                                 "supported by accel; it writes safetensors only\n");
            return 2;
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
    try {
        std::string input = accel::normalize_path(positional[0]);
        std::string output = accel::normalize_path(positional[1]);
        const bool to_file = output.size() > 12 && output.compare(output.size() - 12, 12, ".safetensors") == 0;
        if (!to_file) {
            accel::make_dirs(output);
            output = accel::join(output, "model.safetensors");
        }
        size_t n = ckpt::merge_safetensors_shards(input, output);
        if (remove_input) accel::remove_all(input);
        std::printf("accel merge-weights: wrote %zu tensors to %s\n", n, output.c_str());
        return 0;
    } catch (const Error &e) {
        std::fprintf(stderr, "accel merge-weights: %s\n", e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "accel merge-weights: %s\n", e.what());
        return 1;
    }
}

} // namespace accel::cli
