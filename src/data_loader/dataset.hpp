// The map-style dataset seam of the data loaders (PyTorch's Dataset with __len__ and a batched
// __getitems__): DataLoaderShard and DataLoaderDispatcher only ask a dataset for its size and for the
// collated batch of some sample indices, so in-memory tensors, token windows, memory-mapped files and the
// caller's own datasets all go through the same sampler, sharding, dispatching and resume logic.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace accel {

struct Batch {
    at::Tensor inputs;
    at::Tensor labels;         // undefined when the dataset has no labels
    at::Tensor indices;        // int64 sample indices into the dataset (after shuffling and sharding)
    at::Tensor attention_mask; // undefined unless a padding collate made one
    int64_t size() const { return inputs.size(0); }
};

class Dataset {
public:
    virtual ~Dataset() = default;
    virtual int64_t size() const = 0;
    // The samples `indices` (a 1-d int64 CPU tensor, in batch order) collated: inputs and labels with the
    // batch along dimension 0. Shapes may differ between batches (the dispatcher sends them with each
    // batch). Must be safe to call from several threads at once (prefetch workers). `indices` is left to
    // the loader to fill in. Errors throw accel::Error naming the sample or the file.
    virtual Batch get_batch(const at::Tensor &indices) const = 0;
};

// Samples along dimension 0 of in-memory tensors (accel_dataloader_create_from_tensors, and the
// token windows of accel_dataloader_create_from_tokens as strided views of one stream).
struct TensorDataset : Dataset {
    at::Tensor features;
    at::Tensor labels; // undefined when the loader has no labels
    int64_t size() const override { return features.size(0); }
    Batch get_batch(const at::Tensor &indices) const override;
};

// Windows of block_size + 1 tokens `stride` apart in a stream of `num_tokens` tokens: the ones that fit.
int64_t num_token_windows(int64_t num_tokens, int64_t block_size, int64_t stride);

} // namespace accel
