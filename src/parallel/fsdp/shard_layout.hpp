// ShardLayout: how a sharding engine's flat shards (one per unit) map onto the model's trainable
// parameters. The sharded optimizer steps the shards, but its state dict keeps the unsharded layout (one
// entry per parameter, what DDP and Python write), so that a checkpoint moves between sharded and
// non-sharded runs and between process counts. Sharded state dicts (SHARDED_STATE_DICT) keep each
// rank's piece of every parameter instead: `pieces` says which elements of a parameter a rank holds.
#pragma once

#include "state/state_dict.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace accel::parallel {

struct ShardLayout {
    std::vector<at::Tensor> params;               // the trainable parameters, in the optimizer's order (shapes)
    std::vector<std::vector<size_t>> unit_params; // per shard: indices into `params`, in packing order
    std::vector<size_t> param_unit;               // per parameter: its unit
    std::vector<int64_t> param_offset;            // per parameter: where it starts in its unit's flat buffer
    std::vector<int64_t> shard_numel;             // per unit: the elements of one rank's shard
    int32_t shard_world = 1, shard_rank = 0;      // the ranks the shards are spread over, and this one
    at::TensorOptions shard_options;              // the shards' dtype (float32 masters, whatever the parameters')
    int64_t sub_group_numel = 0;                  // ZeRO-3's sub_group_size: the most elements stepped at once (0: a shard)
    // Collective (every rank, same order): the whole flat tensor of unit `unit` from every rank's
    // shard-shaped piece, padding dropped.
    std::function<at::Tensor(size_t unit, const at::Tensor &shard)> gather;
    // Parameter offload to files (null otherwise): starts bringing shard `unit` into memory (in) or writing
    // it back to its file and freeing it (out), on a worker thread; the returned function waits for that
    // (rethrowing its error) and must be called before the shard or the engine is used again. The optimizer
    // steps an offloaded shard only between the two.
    std::function<std::function<void()>(size_t unit, bool in)> page;

    // The piece of parameter `param` that `rank` holds (numel 0 when none): shards are contiguous slices
    // of the unit's buffer, so a parameter meets each in at most one range.
    TensorPiece piece(size_t param, int32_t rank) const
    {
        const int64_t begin = param_offset[param], end = begin + params[param].numel();
        const int64_t s = shard_numel[param_unit[param]], lo = rank * s, hi = lo + s;
        const int64_t a = std::max(begin, lo), b = std::min(end, hi);
        return TensorPiece{rank, a - begin, std::max<int64_t>(0, b - a)};
    }
    // This rank's piece of parameter `param` cut from `shard_tensor`, a tensor shaped like its unit's shard
    // (the shard itself, or optimizer state over it); undefined when this rank holds none of it.
    at::Tensor local_piece(size_t param, const at::Tensor &shard_tensor) const
    {
        const TensorPiece p = piece(param, shard_rank);
        if (p.numel == 0) return {};
        const int64_t start = param_offset[param] + p.offset - shard_rank * shard_numel[param_unit[param]];
        return shard_tensor.narrow(0, start, p.numel);
    }
};

} // namespace accel::parallel
