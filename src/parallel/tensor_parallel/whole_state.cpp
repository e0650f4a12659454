#include "parallel/tensor_parallel/whole_state.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "optimizer/accelerated_optimizer.hpp"

#include <ATen/core/grad_mode.h>

namespace accel::parallel::tp {

namespace {

// The model's own tensor named `name` (a handle sharing its TensorImpl: set_data on it changes the model's).
at::Tensor tensor_named(const Model &model, const std::string &name)
{
    const at::Tensor *t = model.find_tensor(name);
    if (t == nullptr) fail(ACCEL_ERR_INTERNAL, "tensor parallel: the plan names \"" + name + "\", which the model lacks");
    return *t;
}

bool is_whole(const at::Tensor &t, const ParameterSlicing &s) { return t.size(s.dim) == s.whole; }

// Every rank's slice joined in rank order, the padding past `whole` dropped.
at::Tensor gathered(const at::Tensor &slice, const ParameterSlicing &s, distributed::Communicator &group)
{
    std::vector<at::Tensor> parts = group.allgather(slice.detach().contiguous());
    return join(parts, s.dim, s.groups).narrow(s.dim, 0, s.whole).contiguous();
}

// The optimizer state tensors of a split parameter, checked to be shaped as their parameter.
std::vector<at::Tensor> state_of(AcceleratedOptimizer &optimizer, const at::Tensor &p, const std::string &name)
{
    std::vector<at::Tensor> st = optimizer.state_tensors(p);
    for (const auto &t : st)
        if (t.defined() && t.dim() != p.dim())
            fail(ACCEL_ERR_UNIMPLEMENTED, "tensor parallel: the optimizer state of \"" + name + "\" is not shaped as the "
                                          "parameter (factored moments); checkpoints of it under tp_size > 1 are not built yet");
    return st;
}

template <typename Fn> void for_each_split(const Model &model, Fn &&fn)
{
    const SplitModel split = split_of(model);
    if (!split) return;
    at::NoGradGuard no_grad;
    for (const auto &[name, s] : *split.slicing) fn(name, s, tensor_named(model, name), *split.group);
}

} // namespace

SplitModel split_of(const Model &model)
{
    const auto *planned = dynamic_cast<const TensorParallelModel *>(&model);
    if (planned == nullptr || planned->tensor_parallel_slicing().empty()) return {};
    return {&planned->tensor_parallel_slicing(), planned->tensor_parallel_group()};
}

std::vector<KeptSlice> gather_parameters(const Model &model)
{
    std::vector<KeptSlice> kept;
    for_each_split(model, [&kept](const std::string &, const ParameterSlicing &s, at::Tensor p, distributed::Communicator &g) {
        if (is_whole(p, s)) return;
        kept.push_back({p, p.variable_data()});
        p.set_data(gathered(p, s, g));
    });
    return kept;
}

void slice_parameters(const Model &model, const std::vector<KeptSlice> &kept)
{
    for_each_split(model, [&kept](const std::string &, const ParameterSlicing &s, at::Tensor p, distributed::Communicator &g) {
        if (!is_whole(p, s)) return;
        at::Tensor slice = slice_parameter(p.detach(), s, g.rank(), g.size());
        for (const auto &k : kept)
            if (k.param.is_same(p)) {
                // Back into its own storage (a sharding engine's parameters are views of its flat buffers).
                k.before.copy_(slice);
                slice = k.before;
                break;
            }
        p.set_data(slice);
    });
}

void gather_optimizer_state(const Model &model, AcceleratedOptimizer &optimizer)
{
    for_each_split(model, [&](const std::string &name, const ParameterSlicing &s, at::Tensor p, distributed::Communicator &g) {
        std::vector<at::Tensor> st = state_of(optimizer, p, name);
        if (st.empty()) return;
        for (auto &t : st)
            if (t.defined() && !is_whole(t, s)) t = gathered(t, s, g);
        optimizer.set_state_tensors(p, st);
    });
}

void slice_optimizer_state(const Model &model, AcceleratedOptimizer &optimizer)
{
    for_each_split(model, [&](const std::string &name, const ParameterSlicing &s, at::Tensor p, distributed::Communicator &g) {
        std::vector<at::Tensor> st = state_of(optimizer, p, name);
        if (st.empty()) return;
        for (auto &t : st)
            if (t.defined() && is_whole(t, s)) t = slice_parameter(t, s, g.rank(), g.size());
        optimizer.set_state_tensors(p, st);
    });
}

WholeForCheckpoint::WholeForCheckpoint(std::vector<Part> parts) : parts_(std::move(parts))
{
    try {
        for (const auto &part : parts_) {
            if (!split_of(*part.model)) continue;
            auto kept = gather_parameters(*part.model);
            kept_.insert(kept_.end(), kept.begin(), kept.end());
            for (auto *o : part.optimizers) gather_optimizer_state(*part.model, *o);
        }
    } catch (...) {
        release();
        throw;
    }
}

WholeForCheckpoint::~WholeForCheckpoint() { release(); }

void WholeForCheckpoint::release() noexcept
{
    for (const auto &part : parts_) {
        try {
            if (!split_of(*part.model)) continue;
            slice_parameters(*part.model, kept_);
            for (auto *o : part.optimizers) slice_optimizer_state(*part.model, *o);
        } catch (...) {
        }
    }
    parts_.clear();
    kept_.clear();
}

} // namespace accel::parallel::tp
