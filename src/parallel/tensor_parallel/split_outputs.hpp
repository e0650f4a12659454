// Which model outputs hold only this rank's vocabulary columns (a tensor-parallel model's logits), so that
// compute_loss (ops/loss.cpp) takes the vocabulary-parallel cross-entropy for them, whether the loss is
// computed by train_step or by accel_loss on the tensor accel_model_forward returned: the model marks its
// output, the loss looks it up. A mark lives as long as the tensor it marks (weakly held).
#pragma once

#include "parallel/tensor_parallel/mappings.hpp"

#include <ATen/ATen.h>

#include <optional>

namespace accel::parallel::tp {

struct VocabParallelOutput {
    Group group;
    int64_t vocab_start = 0; // the first vocabulary row this rank's columns hold
    int64_t vocab_size = 0;  // the unpadded vocabulary
};

void mark_vocab_parallel(const at::Tensor &logits, VocabParallelOutput info);
std::optional<VocabParallelOutput> vocab_parallel_of(const at::Tensor &outputs);

} // namespace accel::parallel::tp
