// The communication of tensor parallelism as differentiable operations on the mesh's tp group (Megatron's
// "mappings"): each is a collective in forward and its adjoint in backward, so a split layer's gradients are
// the unsplit layer's without any code in the optimizer or the wrapper.
//
//   copy_to_region            forward: identity           backward: all-reduce (sum)
//   reduce_from_region        forward: all-reduce (sum)   backward: identity
//   gather_last_dim           forward: all-gather, concatenated along the last dimension
//                             backward: this rank's slice of the gradient
//   scatter_last_dim          forward: this rank's slice  backward: all-gather along the last dimension
//   gather_sequence           forward: all-gather along `dim` (sequence parallelism: before a column layer)
//                             backward: reduce-scatter along `dim`
//   reduce_scatter_sequence   forward: reduce-scatter along `dim` (after a row layer)
//                             backward: all-gather along `dim`
//   scatter_sequence          forward: this rank's slice along `dim` (entering the sequence-parallel region
//                             from a replicated one: after the embeddings)   backward: all-gather along `dim`
//   gather_sequence_to_replicated   forward: all-gather along `dim` (leaving the sequence-parallel region into a
//                             replicated one: after a JSON spec's last split block)   backward: this rank's slice
//
// Every rank of the group calls them in the same order with the same shapes (as any collective). With a
// group of one they are the identity (no communication). The split dimensions must divide by the group's
// size (INVALID_ARGUMENT naming the sizes otherwise).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::tp {

using Group = std::shared_ptr<distributed::Communicator>;

at::Tensor copy_to_region(const at::Tensor &x, const Group &group);
at::Tensor reduce_from_region(const at::Tensor &x, const Group &group);
at::Tensor gather_last_dim(const at::Tensor &x, const Group &group);
at::Tensor scatter_last_dim(const at::Tensor &x, const Group &group);
at::Tensor gather_sequence(const at::Tensor &x, const Group &group, int64_t dim);
at::Tensor reduce_scatter_sequence(const at::Tensor &x, const Group &group, int64_t dim);
at::Tensor scatter_sequence(const at::Tensor &x, const Group &group, int64_t dim);
at::Tensor gather_sequence_to_replicated(const at::Tensor &x, const Group &group, int64_t dim);

// Without autograd (the building blocks above, also for checkpoint gathering and the sequence-parallel column
// layer's backward): the concatenation of every rank's `x` along `dim`, this rank's 1/size slice of `x` along
// `dim`, and this rank's 1/size slice of the sum of every rank's `x` along `dim`.
at::Tensor all_gather_along(const at::Tensor &x, distributed::Communicator &group, int64_t dim);
at::Tensor slice_along(const at::Tensor &x, const distributed::Communicator &group, int64_t dim);
at::Tensor reduce_scatter_along(const at::Tensor &x, distributed::Communicator &group, int64_t dim);

// Sequence parallelism splits the positions of each forward over the tp ranks: a whole number each, and no
// key/value cache (generation feeds one position at a time). INVALID_ARGUMENT / UNIMPLEMENTED naming `model` and
// tp_handler.sequence_parallel otherwise.
void check_sequence_split(int64_t length, bool cached, int64_t tp, const char *model);

} // namespace accel::parallel::tp
