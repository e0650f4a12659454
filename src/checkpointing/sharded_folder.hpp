// Sharded state dict folders (SHARDED_STATE_DICT; Accelerate's names pytorch_model_fsdp_{i}/ and
// optimizer_{i}/): every rank writes its pieces of each tensor into rank{r}.safetensors (a 1-D tensor
// per piece, under the tensor's name, so Python's safetensors reads them), and rank 0 writes
// metadata.json with each tensor's dtype, global shape and where its pieces lie (offsets into the
// flattened tensor). Any world size can read such a folder back. No LibTorch: merge-weights joins the
// pieces at the byte level; the LibTorch side (tensors) is in src/accelerator/checkpoint.cpp.
// Saved under tensor parallelism (version 2), a split tensor says how (its "tp": dim, groups, size; tp_pieces.hpp)
// and its pieces are flat ranges of one tp rank's slice: [rank, tp_rank, offset, numel]. Its shape stays the whole
// tensor's (the vocabulary's padding rows are in the slices' pieces, never in what a reader gets).
#pragma once

#include "checkpointing/safetensors_format.hpp"
#include "checkpointing/tp_pieces.hpp"
#include "common/files.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace accel::ckpt {

constexpr const char *kShardedMetadata = "metadata.json";
constexpr const char *kShardedFormat = "accel.sharded_state_dict";

struct ShardedPiece {
    int32_t rank = 0;
    uint64_t offset = 0, numel = 0; // elements of the flattened tensor (under tp: of tp rank tp_rank's slice)
    int32_t tp_rank = 0;
};
struct ShardedTensorMeta {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<uint64_t> shape;      // the whole tensor's
    std::vector<ShardedPiece> pieces; // by (tp_rank, offset); together they cover the tensor (each slice) exactly once
    TpSplit tp;                       // split by tensor parallelism: its pieces are of the slices
};
struct ShardedMeta {
    int32_t world_size = 1;
    std::vector<ShardedTensorMeta> tensors; // in state-dict order
};

// "rank{r}.safetensors"
std::string sharded_rank_file(int32_t rank);
std::string sharded_metadata_json(const ShardedMeta &meta);
// Pytorch_model_fsdp_{i} / optimizer_{i}: Accelerate names the folder with its index even for i = 0.
std::string sharded_model_folder(size_t i);
std::string sharded_optimizer_folder(size_t i);

// A sharded folder opened for reading: metadata.json parsed and checked (pieces in range and covering
// every tensor once), every rank file mapped and each piece checked against it (dtype, numel). Any
// problem is DATA_LOSS naming the file (a missing or truncated rank file included).
class ShardedFolder {
public:
    explicit ShardedFolder(const std::string &dir);
    const ShardedMeta &meta() const { return meta_; }
    const std::string &dir() const { return dir_; }
    // Elements [offset, offset + numel) of tensor `t`'s flattened data into `dst`, from whichever pieces hold
    // them, with pread (no page faults on the mapping; DATA_LOSS if a file shrank).
    void read_range(size_t t, uint64_t offset, uint64_t numel, void *dst) const;
    // Tensor `t`'s bytes in the whole tensor's order, as spans of the mappings (its pieces in offset order;
    // under tp, the runs of each slice's pieces that make up the whole tensor's rows).
    std::vector<std::pair<const uint8_t *, uint64_t>> whole_spans(size_t t) const;
    // The index of tensor `name`, or -1.
    int64_t find(const std::string &name) const;

private:
    // fn(piece, element in the piece, count, element of the range) for the pieces holding elements
    // [offset, offset + numel) of tensor `t`'s flattened data, in order.
    void for_each_run(size_t t, uint64_t offset, uint64_t numel,
                      const std::function<void(size_t, uint64_t, uint64_t, uint64_t)> &fn) const;
    std::string dir_;
    ShardedMeta meta_;
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::vector<std::vector<const uint8_t *>> data_;
    std::map<std::string, size_t> index_;
};

// Is `dir` a sharded folder (holds metadata.json)?
bool is_sharded_folder(const std::string &dir);

} // namespace accel::ckpt
