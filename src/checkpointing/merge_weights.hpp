// `accel merge-weights`: joins sharded safetensors weights into one file at the byte level (no
// LibTorch, so every safetensors dtype passes through). Used by src/cli/.
#pragma once

#include "checkpointing/sharded_folder.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel::ckpt {

// One tensor of a merge's input; its bytes are `spans`, in order (in files its MergeSource keeps mapped).
struct MergedTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<uint64_t> shape;
    std::vector<std::pair<const uint8_t *, uint64_t>> spans;
    uint64_t nbytes() const;
};

// The weights to merge, opened and checked: a folder holding model.safetensors.index.json (or the index
// file itself), a SHARDED_STATE_DICT folder (sharded_folder.hpp), or a save_state folder holding
// pytorch_model_fsdp_0/. Errors: NOT_FOUND, DATA_LOSS naming the file, UNIMPLEMENTED for pickle shards.
class MergeSource {
public:
    explicit MergeSource(const std::string &input);
    ~MergeSource();
    const std::vector<MergedTensor> &tensors() const { return tensors_; }

private:
    std::unique_ptr<ShardedFolder> folder_;
    std::vector<std::unique_ptr<MappedFile>> maps_;
    std::vector<MergedTensor> tensors_;
};

// `input`: a folder holding model.safetensors.index.json (or the index file itself), a SHARDED_STATE_DICT
// folder (sharded_folder.hpp), or a save_state folder holding pytorch_model_fsdp_0/. Writes `output`
// (a file; written to a temporary sibling, fsynced and renamed) with metadata {"format": "pt"}.
// Returns the number of tensors written.
size_t merge_safetensors_shards(const std::string &input, const std::string &output);

// An index's weight_map (model.safetensors.index.json, pytorch_model.bin.index.json; or a bare name -> file
// object): (tensor name, shard file) in the file's order, each file a plain name in the index's folder
// (DATA_LOSS otherwise; duplicate names are refused by the reader).
std::vector<std::pair<std::string, std::string>> index_weight_map(const std::string &index_path);
// The shard file names an index lists, distinct and sorted (validated: plain names, no folders).
std::vector<std::string> index_shard_files(const std::string &index_path);

} // namespace accel::ckpt
