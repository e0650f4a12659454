// Where a tensor-parallel rank's slice lies in the whole tensor, for sharded state dicts saved under tensor
// parallelism (SHARDED_STATE_DICT of TP x FSDP): each rank's pieces are flat ranges of its tp slice, and a slice
// is not a flat range of the whole tensor (a column shard takes part of every row; GPT-2's fused c_attn takes a
// block of each of q, k and v). These map element ranges between the two, so any mesh reads such a folder: whole
// tensors (merge-weights, one process, FSDP without tp) or another tp size's slices. No LibTorch (the CLI links
// it); the split is parallel/tensor_parallel/slicing.hpp's: along `dim`, `groups` equal blocks each cut into
// `size` parts, the dimension first padded up to a multiple of size when groups is 1 (the vocabulary).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace accel::ckpt {

struct TpSplit {
    int64_t dim = -1; // -1: not split (every tp rank holds it whole)
    uint64_t groups = 1;
    uint64_t size = 1;
    explicit operator bool() const { return dim >= 0; }
};

// What is wrong with `s` for a tensor of shape `whole`, or empty (a dimension out of range, a size or groups of
// 0, groups > 1 with a dimension that does not divide by groups x size).
std::string tp_split_problem(const std::vector<uint64_t> &whole, const TpSplit &s);
// The shape of one tp rank's slice (padding included) of a tensor of shape `whole`.
std::vector<uint64_t> tp_slice_shape(const std::vector<uint64_t> &whole, const TpSplit &s);
// Elements [offset, offset + numel) of the whole tensor's flattened data, in order, as runs of consecutive
// elements of one tp rank's slice: fn(tp_rank, offset in that slice's flattened data, count).
using SliceRunFn = std::function<void(uint64_t tp_rank, uint64_t slice_offset, uint64_t count)>;
void whole_to_slice_runs(const std::vector<uint64_t> &whole, const TpSplit &s, uint64_t offset, uint64_t numel,
                         const SliceRunFn &fn);
// Elements [offset, offset + numel) of tp rank `rank`'s slice, in order, as runs of the whole tensor:
// fn(offset in the whole tensor's flattened data, count), nullopt for padding (never saved, read as zeros).
using WholeRunFn = std::function<void(std::optional<uint64_t> whole_offset, uint64_t count)>;
void slice_to_whole_runs(const std::vector<uint64_t> &whole, const TpSplit &s, uint64_t rank, uint64_t offset,
                         uint64_t numel, const WholeRunFn &fn);

} // namespace accel::ckpt
