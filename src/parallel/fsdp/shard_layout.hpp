// ShardLayout: how a sharding engine's flat shards (one per unit) map onto the model's trainable
// parameters. The sharded optimizer steps the shards, but its state dict keeps the unsharded layout (one
// entry per parameter, what DDP and Python write), so that a checkpoint moves between sharded and
// non-sharded runs and between process counts.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace accel::parallel {

struct ShardLayout {
    std::vector<at::Tensor> params;               // the trainable parameters, in the optimizer's order (shapes)
    std::vector<std::vector<size_t>> unit_params; // per shard: indices into `params`, in packing order
    // Collective (every rank, same order): the whole flat tensor of unit `unit` from every rank's
    // shard-shaped piece, padding dropped.
    std::function<at::Tensor(size_t unit, const at::Tensor &shard)> gather;
    // This rank's shard-shaped piece of a whole flat tensor of unit `unit` (no communication).
    std::function<at::Tensor(size_t unit, const at::Tensor &flat)> slice;
};

} // namespace accel::parallel
