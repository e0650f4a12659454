// `accel merge-weights`: joins sharded safetensors weights into one file at the byte level (no
// LibTorch, so every safetensors dtype passes through). Used by src/cli/.
#pragma once

#include <string>
#include <vector>

namespace accel::ckpt {

// `input`: a folder holding model.safetensors.index.json (or the index file itself), a SHARDED_STATE_DICT
// folder (sharded_folder.hpp), or a save_state folder holding pytorch_model_fsdp_0/. Writes `output`
// (a file; written to a temporary sibling, fsynced and renamed) with metadata {"format": "pt"}.
// Returns the number of tensors written.
size_t merge_safetensors_shards(const std::string &input, const std::string &output);

// The shard file names an index lists, distinct and sorted (validated: plain names, no folders).
std::vector<std::string> index_shard_files(const std::string &index_path);

} // namespace accel::ckpt
