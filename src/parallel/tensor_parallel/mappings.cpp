// One autograd Function per mapping (mappings.hpp). The collectives run on the group's Communicator, so
// the threaded test communicator, Gloo, MPI and NCCL all serve.
#include "parallel/tensor_parallel/mappings.hpp"

#include "common/error.hpp"
#include "parallel/tensor_parallel/group_capsule.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <string>

namespace accel::parallel::tp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using distributed::Communicator;
using distributed::ReduceOp;

int64_t checked_dim(const at::Tensor &x, int64_t dim)
{
    if (!x.defined() || x.dim() == 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor parallel: a tensor of at least one dimension is needed");
    if (dim < -x.dim() || dim >= x.dim())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor parallel: dimension " + std::to_string(dim) + " of a " +
                                             std::to_string(x.dim()) + "-d tensor");
    return dim < 0 ? dim + x.dim() : dim;
}

at::Tensor all_reduced(const at::Tensor &x, Communicator &group)
{
    at::Tensor out = x.contiguous().clone(); // the input is autograd's: reduce a copy
    group.allreduce(out, ReduceOp::Sum);
    return out;
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const Group &group)
    {
        ctx->saved_data["group"] = group_capsule(group);
        return x; // LibTorch wraps an input returned as is in a view with this node's history
    }
    static variable_list backward(AutogradContext *ctx, variable_list g)
    {
        return {all_reduced(g[0], capsule_group(ctx->saved_data["group"])), at::Tensor()};
    }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
    static at::Tensor forward(AutogradContext *, const at::Tensor &x, const Group &group)
    {
        return all_reduced(x, *group);
    }
    static variable_list backward(AutogradContext *, variable_list g) { return {g[0], at::Tensor()}; }
};

// All-gather along `dim` into a replicated activation: its gradient is the same on every rank, so backward takes
// this rank's slice (gather_last_dim, gather_sequence_to_replicated).
struct GatherAlong : torch::autograd::Function<GatherAlong> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const Group &group, int64_t dim)
    {
        ctx->saved_data["group"] = group_capsule(group);
        ctx->saved_data["dim"] = dim;
        return all_gather_along(x, *group, dim);
    }
    static variable_list backward(AutogradContext *ctx, variable_list g)
    {
        Communicator &group = capsule_group(ctx->saved_data["group"]);
        return {slice_along(g[0], group, ctx->saved_data["dim"].toInt()).contiguous(), at::Tensor(), at::Tensor()};
    }
};

struct ScatterLastDim : torch::autograd::Function<ScatterLastDim> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const Group &group)
    {
        ctx->saved_data["group"] = group_capsule(group);
        return slice_along(x, *group, -1).contiguous();
    }
    static variable_list backward(AutogradContext *ctx, variable_list g)
    {
        return {all_gather_along(g[0], capsule_group(ctx->saved_data["group"]), -1), at::Tensor()};
    }
};

struct GatherSequence : torch::autograd::Function<GatherSequence> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const Group &group, int64_t dim)
    {
        ctx->saved_data["group"] = group_capsule(group);
        ctx->saved_data["dim"] = dim;
        return all_gather_along(x, *group, dim);
    }
    static variable_list backward(AutogradContext *ctx, variable_list g)
    {
        Communicator &group = capsule_group(ctx->saved_data["group"]);
        return {reduce_scatter_along(g[0], group, ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
    }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const Group &group, int64_t dim)
    {
        ctx->saved_data["group"] = group_capsule(group);
        ctx->saved_data["dim"] = dim;
        return reduce_scatter_along(x, *group, dim);
    }
    static variable_list backward(AutogradContext *ctx, variable_list g)
    {
        Communicator &group = capsule_group(ctx->saved_data["group"]);
        return {all_gather_along(g[0], group, ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
    }
};

struct ScatterSequence : torch::autograd::Function<ScatterSequence> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const Group &group, int64_t dim)
    {
        ctx->saved_data["group"] = group_capsule(group);
        ctx->saved_data["dim"] = dim;
        return slice_along(x, *group, dim).contiguous();
    }
    static variable_list backward(AutogradContext *ctx, variable_list g)
    {
        Communicator &group = capsule_group(ctx->saved_data["group"]);
        return {all_gather_along(g[0], group, ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
    }
};

void check_group(const Group &group)
{
    if (!group) fail(ACCEL_ERR_INTERNAL, "tensor parallel: no tp group");
}

} // namespace

at::Tensor all_gather_along(const at::Tensor &x, Communicator &group, int64_t dim)
{
    dim = checked_dim(x, dim);
    if (group.size() == 1) return x;
    return at::cat(group.allgather(x.contiguous()), dim);
}

at::Tensor slice_along(const at::Tensor &x, const Communicator &group, int64_t dim)
{
    dim = checked_dim(x, dim);
    const int64_t n = group.size();
    if (x.size(dim) % n != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor parallel: dimension " + std::to_string(dim) + " of size " +
                                             std::to_string(x.size(dim)) + " does not divide by the group's " +
                                             std::to_string(n) + " ranks");
    const int64_t part = x.size(dim) / n;
    return x.narrow(dim, group.rank() * part, part);
}

at::Tensor reduce_scatter_along(const at::Tensor &x, Communicator &group, int64_t dim)
{
    dim = checked_dim(x, dim);
    if (group.size() == 1) return x;
    const int64_t n = group.size();
    if (x.size(dim) % n != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor parallel: dimension " + std::to_string(dim) + " of size " +
                                             std::to_string(x.size(dim)) + " does not divide by the group's " +
                                             std::to_string(n) + " ranks");
    // The communicator scatters chunks of dimension 0: bring `dim` first, then back.
    at::Tensor front = x.movedim(dim, 0).contiguous();
    return group.reduce_scatter(front, ReduceOp::Sum).movedim(0, dim).contiguous();
}

at::Tensor copy_to_region(const at::Tensor &x, const Group &group)
{
    check_group(group);
    return group->size() == 1 ? x : CopyToRegion::apply(x, group);
}

at::Tensor reduce_from_region(const at::Tensor &x, const Group &group)
{
    check_group(group);
    return group->size() == 1 ? x : ReduceFromRegion::apply(x, group);
}

at::Tensor gather_last_dim(const at::Tensor &x, const Group &group)
{
    check_group(group);
    return group->size() == 1 ? x : GatherAlong::apply(x, group, checked_dim(x, -1));
}

at::Tensor scatter_last_dim(const at::Tensor &x, const Group &group)
{
    check_group(group);
    return group->size() == 1 ? x : ScatterLastDim::apply(x, group);
}

at::Tensor gather_sequence(const at::Tensor &x, const Group &group, int64_t dim)
{
    check_group(group);
    return group->size() == 1 ? x : GatherSequence::apply(x, group, checked_dim(x, dim));
}

at::Tensor gather_sequence_to_replicated(const at::Tensor &x, const Group &group, int64_t dim)
{
    check_group(group);
    return group->size() == 1 ? x : GatherAlong::apply(x, group, checked_dim(x, dim));
}

at::Tensor reduce_scatter_sequence(const at::Tensor &x, const Group &group, int64_t dim)
{
    check_group(group);
    return group->size() == 1 ? x : ReduceScatterSequence::apply(x, group, checked_dim(x, dim));
}

at::Tensor scatter_sequence(const at::Tensor &x, const Group &group, int64_t dim)
{
    check_group(group);
    return group->size() == 1 ? x : ScatterSequence::apply(x, group, checked_dim(x, dim));
}

void check_sequence_split(int64_t length, bool cached, int64_t tp, const char *model)
{
    if (cached)
        fail(ACCEL_ERR_UNIMPLEMENTED, std::string(model) + ": a key/value cache (generation) under parallelism_config."
                                      "tp_handler.sequence_parallel is not built yet; generate without sequence "
                                      "parallelism");
    if (length % tp != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(model) + ": input: sequence length " + std::to_string(length) +
                                             " does not divide by tp_size (" + std::to_string(tp) +
                                             "), which parallelism_config.tp_handler.sequence_parallel splits it over");
}

} // namespace accel::parallel::tp
