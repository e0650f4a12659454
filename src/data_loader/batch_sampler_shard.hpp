// BatchSamplerShard: which batches of a pass one process gets (Accelerate's data_loader.py; the
// tables of spec/data-and-collectives.md §3). Pure index logic, no tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace accel {

using IndexBatches = std::vector<std::vector<int64_t>>;

// Cuts `order` into batches of `batch_size` (the last one shorter, or dropped with drop_last).
IndexBatches make_batches(const std::vector<int64_t> &order, int64_t batch_size, bool drop_last);

struct ShardSpec {
    int32_t num_processes = 1;
    int32_t process_index = 0;
    bool split_batches = false;
    bool even_batches = true;
};

// This process's batches of one pass, from the global batches of the inner batch sampler.
IndexBatches shard_batches(const IndexBatches &inner, int64_t batch_size, bool drop_last, const ShardSpec &spec);

// len() of a sharded loader over `num_samples` samples, without building the pass.
int64_t sharded_length(int64_t num_samples, int64_t batch_size, bool drop_last, const ShardSpec &spec);

} // namespace accel
