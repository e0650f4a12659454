// The pieces of transformers' sharded weights folder (model-0000i-of-0000n.safetensors + model.safetensors.index.json,
// or the pickle layout's pytorch_model-*.bin + pytorch_model.bin.index.json) for a folder written by several
// processes: each writes its own numbered shards, one writes the index (pipeline stages' save_model). Its own
// header so the few files that write such folders alone include it.
#pragma once

#include "checkpointing/checkpointing.hpp"

#include <string>
#include <utility>
#include <vector>

namespace accel::ckpt {

// Shard `index` (from 0) of `total`: model-0000i-of-0000n.safetensors, or model.safetensors when total <= 1.
std::string weights_shard_name(bool safe, size_t index, size_t total);
// An earlier save's stale shards in `dir` that a folder of `total` shards does not name (huggingface's rule).
void remove_stale_shards(const std::string &dir, bool safe, size_t total);
// `plan`'s groups of `sd` written as shards first .. first + plan.shards.size() - 1 of `total` (each to a
// temporary name, then renamed); each tensor's (name, file) appended to `weight_map`. Returns the files' names.
std::vector<std::string> write_weight_shards(const std::string &dir, const TensorList &sd, const ShardPlan &plan, bool safe,
                                             size_t first, size_t total,
                                             std::vector<std::pair<std::string, std::string>> &weight_map);
// The index (model.safetensors.index.json or pytorch_model.bin.index.json), written durably.
void write_weights_index(const std::string &dir, bool safe, uint64_t total_size,
                         const std::vector<std::pair<std::string, std::string>> &weight_map);

} // namespace accel::ckpt
