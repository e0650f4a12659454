// Frozen parameters under parameter sharding (ZeRO-3, SHARD_GRAD_OP, FULL_SHARD): they are parameters, so they
// are sharded as the trainable ones are (FSDP's use_orig_params keeps frozen and trainable parameters in one flat
// parameter; DeepSpeed partitions every parameter): packed per unit and dtype into a flat buffer padded to a
// multiple of the process count, each rank keeping its slice. The sharding engine gathers a unit's frozen buffers
// with its trainable one and frees them with it. Unlike trainable shards they get no gradient, no reduction and
// no optimizer state, and keep their own dtype (a bf16 pretrained base stays bf16), so a LoRA fine-tune of a large
// frozen base holds 1/N of the base per rank.
#pragma once

#include "state/state_dict.hpp"

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace accel::parallel {

struct FrozenFlat {
    std::vector<std::string> names; // the parameters, first name of each
    std::vector<at::Tensor> params; // views of `full` (its storage freed between uses)
    std::vector<int64_t> offsets;   // where each starts in `full`
    int64_t numel = 0, padded = 0, shard_numel = 0;
    at::Tensor full;  // padded flat buffer, the parameters' dtype
    at::Tensor shard; // this rank's slice, a tensor of its own (the only copy at rest)
    bool gathered = true;

    // The piece of parameter i that `rank` holds (numel 0 when none), as ShardLayout::piece cuts trainable ones.
    TensorPiece piece(size_t i, int32_t rank) const;
    // That piece of this rank's shard (undefined when it holds none).
    at::Tensor local_piece(size_t i, int32_t rank) const;
};

// Packs `params` (frozen, deduplicated, in model order) into one flat per dtype over `world` ranks, this one
// being `rank`. `fill(param, dst)` writes a parameter's values into its flat range (a copy, or a gather of a
// model built partitioned; collective then, in this order on every rank); `sync(full)` may broadcast the whole
// buffer (sync_module_states) before the shard is cut. The parameters become views of the buffer, whose storage
// is then freed.
std::vector<FrozenFlat> pack_frozen(const std::vector<std::pair<std::string, at::Tensor>> &params, int32_t world,
                                    int32_t rank, const std::function<void(const at::Tensor &, const at::Tensor &)> &fill,
                                    const std::function<void(const at::Tensor &)> &sync);

// The buffer gets memory again (before a gather writes it).
void allocate_full(FrozenFlat &f);
// Fills the whole buffer from every rank's shard (`parts[r]`: rank r's, the result of an all-gather of `shard`).
void fill_full(FrozenFlat &f, const std::vector<at::Tensor> &parts);
// Writes made while gathered (summon_full_params) back to this rank's shard.
void write_back(FrozenFlat &f, int32_t rank);
// Frees the buffer; the parameters stay views of it.
void release_full(FrozenFlat &f);
// free_memory: each parameter gets whole memory of its own (the buffer must be gathered).
void unpack(FrozenFlat &f);

} // namespace accel::parallel
