#include "parallel/tensor_parallel/sliced_source.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"

#include <unordered_map>

namespace accel::parallel::tp {

namespace {

ckpt::TpSplit tp_split(const ParameterSlicing &s, int64_t size)
{
    return {s.dim, static_cast<uint64_t>(s.groups), static_cast<uint64_t>(size)};
}

std::vector<uint64_t> unsigned_shape(const std::vector<int64_t> &shape) { return {shape.begin(), shape.end()}; }

} // namespace

std::map<std::string, ParameterSlicing> slicing_by_name(const Model &model)
{
    std::map<std::string, ParameterSlicing> out;
    const SplitModel split = split_of(model);
    if (!split) return out;
    std::unordered_map<const c10::TensorImpl *, const ParameterSlicing *> by_tensor;
    for (const auto &[name, s] : *split.slicing)
        if (const at::Tensor *t = model.find_tensor(name)) by_tensor.emplace(t->unsafeGetTensorImpl(), &s);
    for (const auto &[name, t] : model.named_parameters())
        if (auto it = by_tensor.find(t.unsafeGetTensorImpl()); t.defined() && it != by_tensor.end()) out.emplace(name, *it->second);
    return out;
}

SlicingOf model_slicing(std::map<std::string, ParameterSlicing> by_name)
{
    return [by_name = std::move(by_name)](const std::string &name) -> const ParameterSlicing * {
        auto it = by_name.find(name);
        return it == by_name.end() ? nullptr : &it->second;
    };
}

SlicingOf optimizer_slicing(std::map<std::string, ParameterSlicing> by_name, std::vector<std::string> ids, std::string what)
{
    return [by_name = std::move(by_name), ids = std::move(ids), what = std::move(what)](const std::string &name) -> const ParameterSlicing * {
        const int64_t id = AcceleratedOptimizer::state_tensor_name(name, what).first;
        if (static_cast<size_t>(id) >= ids.size())
            fail(ACCEL_ERR_DATA_LOSS, what + ": tensor \"" + name + "\" is the state of parameter " + std::to_string(id) +
                                          "; the optimizer has " + std::to_string(ids.size()));
        auto it = by_name.find(ids[static_cast<size_t>(id)]);
        return it == by_name.end() ? nullptr : &it->second;
    };
}

ckpt::TpSave tp_save(const Model &model, const ShardedState &state, const SlicingOf &slicing_of)
{
    const SplitModel split = split_of(model);
    ckpt::TpSave out;
    out.rank = static_cast<int32_t>(split.group->rank());
    out.size = static_cast<int32_t>(split.group->size());
    for (const auto &t : state.tensors) {
        const ParameterSlicing *s = slicing_of(t.name);
        if (s == nullptr) continue;
        const ckpt::TpSplit how = tp_split(*s, out.size);
        std::vector<uint64_t> whole = unsigned_shape(t.shape);
        if (static_cast<size_t>(s->dim) < whole.size()) whole[static_cast<size_t>(s->dim)] = static_cast<uint64_t>(s->whole);
        if (static_cast<size_t>(s->dim) >= whole.size() || ckpt::tp_slice_shape(whole, how) != unsigned_shape(t.shape))
            fail(ACCEL_ERR_UNIMPLEMENTED, "save_state: \"" + t.name + "\" is not shaped as its parameter's tp slice (factored "
                                          "moments); fsdp_plugin.state_dict_type SHARDED_STATE_DICT of it under tp_size > 1 "
                                          "is not built yet");
        out.split[t.name] = {how, static_cast<uint64_t>(s->whole)};
    }
    return out;
}

ShardedSource sliced_source(const ShardedSource &whole, SlicingOf slicing_of, int64_t rank, int64_t size)
{
    // The split of `name` when the source holds it whole (its shape in `shape`), else nullopt.
    auto split = [whole, slicing_of, size](const std::string &name, std::vector<int64_t> &shape) -> std::optional<ckpt::TpSplit> {
        if (!whole.find(name, shape)) return std::nullopt;
        const ParameterSlicing *s = slicing_of(name);
        if (s == nullptr || s->dim >= static_cast<int64_t>(shape.size()) || shape[static_cast<size_t>(s->dim)] != s->whole)
            return std::nullopt;
        const ckpt::TpSplit how = tp_split(*s, size);
        if (!ckpt::tp_split_problem(unsigned_shape(shape), how).empty()) return std::nullopt;
        return how;
    };
    ShardedSource out = whole;
    out.find = [whole, split](const std::string &name, std::vector<int64_t> &shape) {
        if (!whole.find(name, shape)) return false;
        if (auto how = split(name, shape)) {
            const std::vector<uint64_t> slice = ckpt::tp_slice_shape(unsigned_shape(shape), *how);
            shape.assign(slice.begin(), slice.end());
        }
        return true;
    };
    out.read = [whole, split, rank](const std::string &name, int64_t offset, const at::Tensor &dst) {
        std::vector<int64_t> shape;
        const auto how = split(name, shape);
        if (!how) return whole.read(name, offset, dst);
        at::Tensor flat = dst.view({-1});
        int64_t at = 0;
        ckpt::slice_to_whole_runs(unsigned_shape(shape), *how, static_cast<uint64_t>(rank), static_cast<uint64_t>(offset),
                                  static_cast<uint64_t>(dst.numel()), [&](std::optional<uint64_t> from, uint64_t count) {
                                      at::Tensor part = flat.narrow(0, at, static_cast<int64_t>(count));
                                      if (from) whole.read(name, static_cast<int64_t>(*from), part);
                                      else part.zero_(); // the vocabulary's padding rows
                                      at += static_cast<int64_t>(count);
                                  });
    };
    return out;
}

} // namespace accel::parallel::tp
