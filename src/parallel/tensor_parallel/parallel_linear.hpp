// Tensor-parallel implementations of the linear seam (model/linear.hpp), as decorators of the Linear that
// computes this rank's slice (the plain layer, or fp8 / LoRA around it), so they compose with the others.
//
// Column parallel (Megatron's ColumnParallelLinear): the rank holds a slice of the outputs (weight and bias
// split along the output dimension). Forward: copy_to_region(x) (its backward all-reduces the input
// gradient), then the local layer; the output stays split unless gather_output.
// Row parallel (RowParallelLinear): the rank holds a slice of the inputs (weight split along the input
// dimension, bias whole). Forward: the local layer on this rank's slice of x (x already split when
// input_is_parallel, else scattered here), reduce_from_region of the partial sums, then the bias once.
// With sequence parallelism (sequence_dim >= 0) the column layer all-gathers its input along the sequence
// dimension instead of copying it, and the row layer reduce-scatters its output along it instead of
// all-reducing (Megatron's sequence-parallel region); the row layer adds its bias to the shard. Over the plain
// local layer (make_linear: what the plans build) the column layer keeps only the input's sequence shard for
// backward and gathers it again there (Megatron's), not the gathered input: tp times less held per layer.
#pragma once

#include "model/linear.hpp"
#include "parallel/tensor_parallel/mappings.hpp"

#include <memory>

namespace accel::parallel::tp {

struct ColumnParallelOptions {
    bool gather_output = false;
    int64_t sequence_dim = -1; // >= 0: the input arrives sequence-sharded along this dimension
};

struct RowParallelOptions {
    bool input_is_parallel = true;
    int64_t sequence_dim = -1; // >= 0: the output leaves sequence-sharded along this dimension
};

// `local`: the layer over this rank's weight and bias slices.
std::shared_ptr<Linear> make_column_parallel_linear(std::shared_ptr<Linear> local, Group group,
                                                    ColumnParallelOptions options = {});
// `local`: the layer over this rank's weight slice, without a bias; `bias` the whole bias (or undefined).
std::shared_ptr<Linear> make_row_parallel_linear(std::shared_ptr<Linear> local, at::Tensor bias, Group group,
                                                 RowParallelOptions options = {});

} // namespace accel::parallel::tp
