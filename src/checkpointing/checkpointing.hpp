// save_state / load_state in Accelerate's folder layout, save_model with shards, loading weights back
// into a model (shared/spec/checkpoint-format.md §1-5, §8). Crash safety: every save_state writes into
// "<parent>/.<name>.accel-tmp", fsyncs each file and the folder, and renames it into place; temporary
// folders are never taken for checkpoints, and rotation deletes old checkpoints only afterwards.
#pragma once

#include "checkpointing/safetensors.hpp"
#include "config/checkpoint_options.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel {
class Accelerator;
class Model;
} // namespace accel

namespace accel::ckpt {

// Returns the folder written. `output_dir` may be null with automatic checkpoint naming.
std::string save_state(Accelerator &acc, const char *output_dir, const config::SaveStateOptions &options);
// Returns the folder loaded. `input_dir` null: the newest automatic checkpoint.
std::string load_state(Accelerator &acc, const char *input_dir, const config::LoadStateOptions &options);

void save_model(Accelerator &acc, const Model &model, const std::string &save_directory,
                const config::SaveModelOptions &options);
// A .safetensors or torch file, or a folder (sharded with an index, or a single weights file).
void load_checkpoint_in_model(Model &model, const std::string &path, const config::LoadCheckpointOptions &options);

// ---- pieces exposed for tests ----------------------------------------------------------------------

// The first run of digits in a name ("checkpoint_10" -> 10), or nullopt.
std::optional<int64_t> first_number(const std::string &name);
// Checkpoint folder names in `base`, oldest number first (temporary folders and names without digits
// are ignored).
std::vector<std::string> sorted_checkpoints(const std::string &base);

// A model's state dict (parameters, then buffers), with shared storages listed once (first name kept).
TensorList model_state_dict(const Model &model, bool dedupe_shared);

// huggingface_hub's split_torch_state_dict_into_shards: groups of indices into `tensors`.
struct ShardPlan {
    std::vector<std::vector<size_t>> shards;
    uint64_t total_size = 0;
};
ShardPlan plan_shards(const TensorList &tensors, uint64_t max_shard_size);
// {"metadata": {"total_size": N}, "weight_map": {...}} with 2-space indent and sorted keys, plus "\n".
std::string index_json(uint64_t total_size, const std::vector<std::pair<std::string, std::string>> &weight_map);

} // namespace accel::ckpt
