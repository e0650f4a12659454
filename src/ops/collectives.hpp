// Accelerate's collective helpers (utils/operations.py, state.py) over a Communicator: gather,
// gather_for_metrics, reduce, broadcast, pad_across_processes, split_between_processes. With one
// process they return the input (reduce: a clone), as Accelerate does.
#pragma once

#include "state/gradient_state.hpp"

#include <ATen/ATen.h>

#include <string>

namespace accel::distributed {
class Communicator;
}

namespace accel::ops {

// All-gather, concatenated on dim 0 in rank order; a 0-d tensor becomes shape [1] first.
at::Tensor gather(distributed::Communicator &comm, const at::Tensor &t);
// gather(), then at the end of the active data loader only the first `remainder` rows are kept.
at::Tensor gather_for_metrics(distributed::Communicator &comm, const GradientState &gs, const at::Tensor &t);
// "sum", "mean", "max", "min" ("none" sums, as Accelerate). Returns a new tensor.
at::Tensor reduce(distributed::Communicator &comm, const at::Tensor &t, const std::string &reduction);
// In place, from `from_process`.
void broadcast(distributed::Communicator &comm, at::Tensor &t, int32_t from_process);
at::Tensor pad_across_processes(distributed::Communicator &comm, const at::Tensor &t, int64_t dim, double pad_index,
                                bool pad_first);
// This rank's contiguous share of dim 0; the first n % P ranks get one more row. apply_padding pads
// every share to the same length with the global last row.
at::Tensor split_between_processes(distributed::Communicator &comm, const at::Tensor &t, bool apply_padding);

} // namespace accel::ops
