// The loss of a context-parallel model: each rank's logits cover its part of every sequence, the loss is the
// whole sequences' mean. The model marks its logits with the cp group; compute_loss (ops/loss.cpp) computes
// this rank's mean over its counted positions and hands it here. The returned value is the whole batch's mean
// on every cp rank (what one process reports); its gradient is this rank's part of that mean times cp_size,
// because the data-parallel wrapper averages gradients over dp_cp (Accelerate averages the loss over dp_cp).
// Positions labelled ignore_index are counted out on every rank, so unequal counts still give the exact mean.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::cp {

void mark_context_parallel(const at::Tensor &outputs, std::shared_ptr<distributed::Communicator> group);
std::shared_ptr<distributed::Communicator> context_parallel_of(const at::Tensor &outputs);

// `local_mean` is this rank's mean loss over `local_count` positions (any value when the count is 0).
at::Tensor whole_sequence_loss(const at::Tensor &local_mean, const at::Tensor &local_count,
                               distributed::Communicator &group);

} // namespace accel::parallel::cp
