// Context parallelism at prepare (parallelism_config.cp_size > 1): the model's attention is computed over the
// whole sequence through the mesh's cp group (attention.hpp, with parallelism_config.cp_handler's
// cp_comm_strategy), its positions are the whole sequence's, its loss the whole sequence's mean (loss.hpp).
// Parameters stay whole on every cp rank; their gradients are averaged over dp_cp by the data-parallel wrapper
// the accelerator puts around the model (DDP, or DDP inside tensor parallelism's), so checkpoints are those of
// one process. The prepared data loader splits each batch's sequence (sequence_split.hpp).
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace accel {
class Model;
struct Batch;
} // namespace accel

namespace accel::distributed {
class DeviceMesh;
}

namespace accel::parallel::cp {

// Applies the model's context-parallel plan once (a model already under it is left alone). UNIMPLEMENTED
// naming the model type for models without one (the gpt and llama models have one). `strategy`: a
// cp_comm_strategy, or "ulysses" for sp_size (whose heads must divide by the group's size: INVALID_ARGUMENT
// naming them).
void prepare_context_parallel(Model &model, const distributed::DeviceMesh &mesh, const std::string &strategy);

// This rank's part of a batch (inputs, labels and attention mask [B, T, ...] split along T), for the prepared
// loader. A T that is not a multiple of 2 x cp_size is first padded at the end to the next one (inputs and the
// attention mask with 0, labels with -100, PyTorch's ignore_index): causal attention keeps padded keys from
// every real query, so the loss is the unpadded sequence's. INVALID_ARGUMENT naming the tensor when it has no
// sequence dimension or its length differs from the inputs', or from `fixed_length` when that is not 0
// (ParallelismConfig::fixed_sequence_length).
void split_batch(Batch &batch, const distributed::DeviceMesh &mesh, int64_t fixed_length = 0);

} // namespace accel::parallel::cp
