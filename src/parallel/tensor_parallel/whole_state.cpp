#include "parallel/tensor_parallel/whole_state.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "optimizer/accelerated_optimizer.hpp"

#include <ATen/core/grad_mode.h>
#include <unordered_map>

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

[[noreturn]] void refuse_unshaped_state(const std::string &name)
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "tensor parallel: the optimizer state of \"" + name + "\" is not shaped as the "
                                  "parameter (factored moments); checkpoints of it under tp_size > 1 are not built yet");
}

// The optimizer state tensors of a split parameter, checked to be shaped as their parameter.
std::vector<at::Tensor> state_of(AcceleratedOptimizer &optimizer, const at::Tensor &p, const std::string &name)
{
    std::vector<at::Tensor> st = optimizer.state_tensors(p);
    for (const auto &t : st)
        if (t.defined() && t.dim() != p.dim()) refuse_unshaped_state(name);
    return st;
}

template <typename Fn> void for_each_split(const Model &model, Fn &&fn)
{
    const SplitModel split = split_of(model);
    if (!split) return;
    at::NoGradGuard no_grad;
    for (const auto &[name, s] : *split.slicing) fn(name, s, tensor_named(model, name), *split.group);
}

// `sd` (an optimizer state dict in PyTorch's per-parameter form) with every per-element state tensor of a split
// parameter replaced by fn(tensor, its parameter, slicing, group); the rest shared with `sd`. Ids the names do
// not cover are left for the optimizer's own checks.
template <typename Fn>
PyRef map_split_state(const Model &model, const PyObj &sd, const std::vector<std::string> &names, Fn &&fn)
{
    auto out = std::make_shared<PyObj>(sd);
    const SplitModel split = split_of(model);
    if (!split) return out;
    at::NoGradGuard no_grad;
    for (auto &[key, value] : out->map) {
        if (key->kind != PyObj::Kind::Str || key->s != "state" || !value->is_dict()) continue;
        value = std::make_shared<PyObj>(*value);
        for (auto &[id, entry] : value->map) {
            if (id->kind != PyObj::Kind::Int || id->i < 0 || static_cast<size_t>(id->i) >= names.size() || !entry->is_dict())
                continue;
            const std::string &name = names[static_cast<size_t>(id->i)];
            const auto it = split.slicing->find(name);
            if (it == split.slicing->end()) continue;
            const at::Tensor p = tensor_named(model, name);
            entry = std::make_shared<PyObj>(*entry);
            for (auto &kv : entry->map)
                if (kv.second->kind == PyObj::Kind::Tensor && kv.second->tensor.dim() > 0) // not "step"
                    kv.second = py_tensor(fn(kv.second->tensor, p, name, it->second, *split.group));
        }
    }
    return out;
}

} // namespace

PyRef joined_optimizer_state(const Model &model, const PyObj &state_dict, const std::vector<std::string> &names)
{
    return map_split_state(model, state_dict, names,
                           [](const at::Tensor &t, const at::Tensor &p, const std::string &name, const ParameterSlicing &s,
                              distributed::Communicator &g) {
                               if (t.sizes() != p.sizes()) refuse_unshaped_state(name);
                               return gathered(t, s, g);
                           });
}

PyRef sliced_optimizer_state(const Model &model, const PyObj &state_dict, const std::vector<std::string> &names)
{
    // A tensor that is not the whole parameter's shape is left as it is: the optimizer's load names it.
    return map_split_state(model, state_dict, names,
                           [](const at::Tensor &t, const at::Tensor &p, const std::string &, const ParameterSlicing &s,
                              distributed::Communicator &g) {
                               return t.dim() == p.dim() && is_whole(t, s) ? slice_parameter(t, s, g.rank(), g.size()) : t;
                           });
}

TensorList sliced_weights(const Model &model, TensorList whole)
{
    const SplitModel split = split_of(model);
    if (!split) return whole;
    // By identity: a key the model resolves to a split parameter (a tied head's name too) is cut as that one.
    std::unordered_map<const c10::TensorImpl *, const ParameterSlicing *> by_tensor;
    for (const auto &[name, s] : *split.slicing) by_tensor.emplace(tensor_named(model, name).unsafeGetTensorImpl(), &s);
    for (auto &[name, t] : whole) {
        const at::Tensor *mine = model.find_tensor(name);
        if (mine == nullptr) continue;
        const auto it = by_tensor.find(mine->unsafeGetTensorImpl());
        if (it != by_tensor.end() && t.dim() == mine->dim() && is_whole(t, *it->second))
            t = slice_parameter(t, *it->second, split.group->rank(), split.group->size());
    }
    return whole;
}

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
        // A pipeline stage's save_model gathers its own parameters only: the other stages' hold no elements.
        if (p.numel() == 0 || is_whole(p, s)) return;
        kept.push_back({p, p.variable_data()});
        p.set_data(gathered(p, s, g));
    });
    return kept;
}

void slice_parameters(const Model &model, const std::vector<KeptSlice> &kept)
{
    for_each_split(model, [&kept](const std::string &, const ParameterSlicing &s, at::Tensor p, distributed::Communicator &g) {
        if (p.numel() == 0 || !is_whole(p, s)) return;
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
