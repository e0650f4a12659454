// save_state under deepspeed_plugin (ZeRO 1-3): each model and its optimizer in DeepSpeed's own layout
// (checkpointing/deepspeed_folder.hpp), as Accelerate leaves it. DeepSpeed cuts the parameters otherwise than
// accel's engine does (per group or per parameter, not per unit), so each parameter's float32 values and
// optimizer state are moved tensor by tensor (every rank, same order) from accel's pieces to DeepSpeed's
// partitions: each rank receives only the ranges of its partition that another rank holds, and nothing
// larger than the rank's own part of one tensor is ever in flight.
#include "accelerator/accelerator.hpp"
#include "accelerator/deepspeed_save.hpp"

#include "checkpointing/checkpointing.hpp"
#include "checkpointing/deepspeed_folder.hpp"
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "distributed/device_mesh.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/stage_checkpoint.hpp"
#include "parallel/wrapper.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>

namespace accel {

namespace {

// Moves the elements of sharded tensor `t` (a parameter's values or one of its state tensors) into `into`, this
// rank's flat tensor of the parameter's group, where `runs[r]` (the parameter's runs of DeepSpeed's partition,
// for every rank r) say (collective). A rank holds one piece of a tensor at most; each rank sends each other
// rank only the overlap of its piece with that rank's runs. The pairs exchange one after another in the same
// order on every rank, the lower rank sending first, so blocking sends and receives never wait in a cycle.
void move_to_partition(const ShardedTensor &t, const std::vector<std::vector<ckpt::DsRun>> &runs, const at::Tensor &into,
                       distributed::Communicator &comm)
{
    const int32_t world = comm.size(), rank = comm.rank();
    std::vector<const TensorPiece *> piece_of(static_cast<size_t>(world), nullptr);
    for (const auto &p : t.pieces) {
        if (piece_of.at(static_cast<size_t>(p.rank)) != nullptr)
            fail(ACCEL_ERR_INTERNAL, "save_state: \"" + t.name + "\" has two pieces on one process");
        piece_of[static_cast<size_t>(p.rank)] = &p;
    }
    struct Segment {
        int64_t from, to, numel; // offset in the sender's piece, offset in the receiver's flat tensor
    };
    auto segments = [&](int32_t src, int32_t dst) {
        std::vector<Segment> out;
        const TensorPiece *p = piece_of[static_cast<size_t>(src)];
        if (p == nullptr) return out;
        for (const auto &run : runs[static_cast<size_t>(dst)]) {
            const int64_t lo = std::max(p->offset, run.param_offset);
            const int64_t hi = std::min(p->offset + p->numel, run.param_offset + run.numel);
            if (hi > lo) out.push_back({lo - p->offset, run.flat_offset + lo - run.param_offset, hi - lo});
        }
        return out;
    };
    auto total = [](const std::vector<Segment> &segs) {
        int64_t n = 0;
        for (const auto &s : segs) n += s.numel;
        return n;
    };
    const at::Tensor local = t.local.defined() ? t.local.reshape({-1}) : at::Tensor();
    for (const auto &s : segments(rank, rank)) into.narrow(0, s.to, s.numel).copy_(local.narrow(0, s.from, s.numel));
    for (int32_t lo = 0; lo < world; ++lo)
        for (int32_t hi = lo + 1; hi < world; ++hi) {
            if (rank != lo && rank != hi) continue;
            const int32_t other = rank == lo ? hi : lo;
            const std::vector<Segment> out = segments(rank, other), in = segments(other, rank);
            auto send = [&] {
                if (out.empty()) return;
                at::Tensor packed = at::empty({total(out)}, local.options());
                int64_t pos = 0;
                for (const auto &s : out) {
                    packed.narrow(0, pos, s.numel).copy_(local.narrow(0, s.from, s.numel));
                    pos += s.numel;
                }
                comm.send(packed, other, 0);
            };
            auto receive = [&] {
                if (in.empty()) return;
                at::Tensor packed = at::empty({total(in)}, at::TensorOptions().dtype(t.dtype));
                comm.recv(packed, other, 0);
                int64_t pos = 0;
                for (const auto &s : in) {
                    into.narrow(0, s.to, s.numel).copy_(packed.narrow(0, pos, s.numel));
                    pos += s.numel;
                }
            };
            if (rank == lo) {
                send();
                receive();
            } else {
                receive();
                send();
            }
        }
}

bool same_value(const PyObj &a, const PyObj &b)
{
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case PyObj::Kind::None: return true;
    case PyObj::Kind::Bool: return a.b == b.b;
    case PyObj::Kind::Int: return a.i == b.i;
    case PyObj::Kind::Float: return a.f == b.f;
    case PyObj::Kind::Tensor: return a.tensor.numel() == 1 && b.tensor.numel() == 1 && at::equal(a.tensor, b.tensor);
    default: return false;
    }
}

int64_t step_count(const PyObj *entry)
{
    const PyObj *step = entry != nullptr ? entry->get("step") : nullptr;
    return step == nullptr ? 0 : static_cast<int64_t>(py_number(*step).value_or(0.0));
}

} // namespace

bool Accelerator::deepspeed_layout(const Model &model) const
{
    const auto *e = sharded_of(model);
    return e != nullptr && e->config().frontend == "deepspeed" && e->config().zero_stage >= 1 &&
           optimizer_of(model) != nullptr;
}

AcceleratedOptimizer *Accelerator::optimizer_of(const Model &model) const
{
    for (const auto &o : optimizers_)
        if (o->model().get() == &model && o->is_sharded()) return o.get();
    return nullptr;
}

void Accelerator::add_deepspeed_files(std::vector<ckpt::CheckpointFile> &files, size_t i, bool main)
{
    const Model &model = *models_.at(i);
    // Under tensor parallelism each tp rank's slices are a model of their own to DeepSpeed (as under Megatron's
    // mpu): the ZeRO partitions span the data-parallel group the engine shards over, the files carry the tp rank
    // (mp_rank_XX), and data-parallel rank 0 of each tp rank writes its model states. Under pp the same group
    // of each stage; the first stage writes.
    const parallel::tp::SplitModel split = parallel::tp::split_of(model);
    parallel::ParallelWrapper *wrapper = wrapper_of(model);
    parallel::pp::PipelineParallel *pipeline = wrapper != nullptr ? wrapper->pipeline() : nullptr;
    const bool on_mesh = split || pipeline != nullptr;
    const auto &mesh = state_->mesh;
    if (on_mesh && mesh == nullptr) fail(ACCEL_ERR_INTERNAL, "save_state: a model split by tensor or pipeline parallelism without a mesh");
    DeepSpeedSave how;
    how.dp = on_mesh ? mesh->group(distributed::MeshDim::DpShardCp).get() : state_->comm.get();
    how.pipeline = pipeline;
    // Replicas over dp_replicate hold the same partitions: the first one writes them.
    how.writes = !on_mesh || mesh->rank_in(distributed::MeshDim::DpReplicate) == 0;
    how.main = on_mesh ? how.dp->rank() == 0 : main;
    how.bf16 = state_->config.mixed_precision == ACCEL_MIXED_PRECISION_BF16;
    const std::string tag = ckpt::deepspeed_tag(i);
    for (auto &[name, object] : deepspeed_rank_files(model, *sharded_of(model), *optimizer_of(model), how))
        files.push_back({tag + "/" + name, std::move(object), nullptr, nullptr});
}

namespace {

// The whole model's trainable parameters under pp (collective over the pp group): each stage knows the shapes of
// the ones it holds (the others have no elements there); `params` gets every one's shape, `owner` the first
// stage holding each (the tied embedding: the first stage's, as one process's layout counts it once).
void whole_parameters(std::vector<ckpt::DsParam> &params, std::vector<int32_t> &owner, distributed::Communicator &pp)
{
    constexpr int64_t kMaxDims = 8;
    at::Tensor held = at::full({static_cast<int64_t>(params.size()), kMaxDims + 1}, -1, at::kLong);
    for (size_t k = 0; k < params.size(); ++k) {
        const auto &shape = params[k].shape;
        if (params[k].numel() == 0 || static_cast<int64_t>(shape.size()) > kMaxDims) continue; // none held (or 9-D: none)
        held[static_cast<int64_t>(k)][0] = static_cast<int64_t>(shape.size());
        for (size_t d = 0; d < shape.size(); ++d) held[static_cast<int64_t>(k)][static_cast<int64_t>(d + 1)] = shape[d];
    }
    const std::vector<at::Tensor> all = pp.allgather(held);
    for (size_t k = 0; k < params.size(); ++k) {
        const auto row = static_cast<int64_t>(k);
        int32_t s = 0;
        while (s < pp.size() && all[static_cast<size_t>(s)][row][0].item<int64_t>() < 0) ++s;
        if (s == pp.size())
            fail(ACCEL_ERR_UNIMPLEMENTED, "save_state: parameter \"" + params[k].name + "\" has no elements on any pipeline "
                                          "stage (or more than 8 dimensions); DeepSpeed's layout cannot hold it");
        owner[k] = s;
        const at::Tensor r = all[static_cast<size_t>(s)][row];
        params[k].shape.clear();
        for (int64_t d = 0; d < r[0].item<int64_t>(); ++d) params[k].shape.push_back(r[d + 1].item<int64_t>());
    }
}

// Each optimizer group's step count on this stage (-1: no state; -2: its parameters disagree), agreed over
// the pp group (every rank fails alike): the groups' counts must be the same on every stage holding them.
void agree_on_steps(const std::vector<int64_t> &steps, distributed::Communicator *pp)
{
    const at::Tensor mine = at::tensor(steps, at::kLong);
    const std::vector<at::Tensor> all = pp != nullptr ? pp->allgather(mine) : std::vector<at::Tensor>{mine};
    for (size_t g = 0; g < steps.size(); ++g) {
        int64_t seen = -1;
        bool agree = true;
        for (const auto &t : all) {
            const int64_t v = t[static_cast<int64_t>(g)].item<int64_t>();
            if (v == -2 || (v >= 0 && seen >= 0 && v != seen)) agree = false;
            if (v >= 0) seen = v;
        }
        if (!agree)
            fail(ACCEL_ERR_UNIMPLEMENTED, "save_state: the parameters of optimizer group " + std::to_string(g) +
                                              " have taken different numbers of steps (some had no gradient), which "
                                              "DeepSpeed's layout cannot hold (one state per group)");
    }
}

bool same_entry(const PyObj *a, const PyObj *b)
{
    return a != nullptr && b != nullptr && a->map.size() == b->map.size() &&
           std::equal(a->map.begin(), a->map.end(), b->map.begin(),
                      [](const auto &x, const auto &y) { return x.first->s == y.first->s && same_value(*x.second, *y.second); });
}

PyRef named_dict(const std::map<std::string, at::Tensor> &tensors)
{
    auto d = py_dict();
    for (const auto &[name, t] : tensors) py_set(*d, name, py_tensor(t));
    return d;
}

} // namespace

std::vector<std::pair<std::string, PyRef>> deepspeed_rank_files(const Model &model, parallel::ShardedDataParallel &engine,
                                                                const AcceleratedOptimizer &optimizer, const DeepSpeedSave &how)
{
    distributed::Communicator &comm = *how.dp;
    const parallel::tp::SplitModel split = parallel::tp::split_of(model);
    distributed::Communicator *pp = how.pipeline != nullptr ? how.pipeline->pp_group().get() : nullptr;
    if (pp != nullptr && pp->size() <= 1) pp = nullptr;
    // Agreed over the stages: a stage without sharded frozen parameters would otherwise wait for the others in vain.
    bool frozen = false;
    if (pp != nullptr)
        for (const auto &flag : pp->allgather(at::full({1}, engine.shards_frozen() ? 1 : 0, at::kLong)))
            frozen = frozen || flag.item<int64_t>() != 0;
    if (pp != nullptr && (split || frozen))
        fail(ACCEL_ERR_UNIMPLEMENTED, std::string("save_state: parallelism_config.pp_size > 1 under deepspeed_plugin with ") +
                                          (split ? "tp_size > 1" : "frozen parameters sharded by ZeRO-3") +
                                          " is not supported yet (the stages' partitions are joined without them)");
    const int32_t me = pp != nullptr ? pp->rank() : 0; // the pipeline stage; the first writes
    const int stage = static_cast<int>(engine.config().zero_stage);
    const int32_t world = comm.size(), rank = comm.rank();
    const bool main = how.main && me == 0;

    const ShardedState masters = engine.sharded_state_dict(model);
    const ShardedState state = optimizer.sharded_state_dict();
    if (masters.world_size != world || state.world_size != world)
        fail(ACCEL_ERR_INTERNAL, "save_state: DeepSpeed's layout needs the shards spread over every data-parallel process");

    // The trainable parameters group by group (the whole model's under pp), and where DeepSpeed puts each one's
    // elements on this rank.
    const auto names = optimizer.param_names_by_group();
    std::vector<ckpt::DsParam> params;
    for (size_t g = 0; g < names.size(); ++g)
        for (const auto &name : names[g]) params.push_back({name, model.find_tensor(name)->sizes().vec(), g});
    std::vector<int32_t> owner(params.size(), 0);
    if (pp != nullptr) whole_parameters(params, owner, *pp);
    const ckpt::DsPartition part(params, names.size(), stage, world);
    // runs_of[k][r]: parameter k's runs in rank r's flat tensor of its group.
    std::vector<std::vector<std::vector<ckpt::DsRun>>> runs_of(params.size(), std::vector<std::vector<ckpt::DsRun>>(static_cast<size_t>(world)));
    for (int32_t r = 0; r < world; ++r)
        for (size_t g = 0; g < names.size(); ++g)
            for (const auto &run : part.runs(r, g)) runs_of[run.param][static_cast<size_t>(r)].push_back(run);
    std::map<std::string, size_t> index;
    for (size_t k = 0; k < params.size(); ++k) index[params[k].name] = k;

    ckpt::DsRankState s;
    s.rank = rank;
    if (split) {
        s.mp_rank = split.group->rank();
        s.mp_world = split.group->size();
        for (const auto &[name, sl] : *split.slicing)
            if (sl.dim >= 0) s.tp_slicing.emplace_back(name, ckpt::DsSlicing{sl.dim, sl.groups, sl.whole});
    }
    s.clip_grad = engine.config().gradient_clipping;
    s.bf16 = how.bf16;
    auto flat = [&](size_t g, at::ScalarType dtype) { return at::zeros({part.flat_numel(g)}, at::TensorOptions().dtype(dtype)); };
    for (size_t g = 0; g < names.size(); ++g) s.fp32.push_back(flat(g, at::kFloat));
    for (const auto &t : masters.tensors) { // the same list, in the same order, on every rank of the stage
        auto it = index.find(t.name);
        if (it == index.end() || owner[it->second] != me) continue; // buffers and frozen parameters: below
        move_to_partition(t, runs_of[it->second], s.fp32[params[it->second].group], comm);
    }

    // The optimizer state: DeepSpeed's base optimizer steps one flat tensor per group, so each group's
    // per-element state is cut as its parameters are, and the rest (step counts) must agree within a group.
    const PyObj *rest_state = state.rest->get("state");
    const PyObj *groups = state.rest->get("param_groups");
    std::vector<std::vector<std::pair<std::string, at::Tensor>>> per_element(names.size());
    for (const auto &t : state.tensors) {
        const auto named = AcceleratedOptimizer::state_tensor_name(t.name, "save_state");
        const size_t k = static_cast<size_t>(named.first);
        if (owner.at(k) != me) continue; // the tied embedding's on the last stage: the first stage's is written
        const std::string &key = named.second;
        auto &slots = per_element.at(params.at(k).group);
        auto slot = std::find_if(slots.begin(), slots.end(), [&key](const auto &e) { return e.first == key; });
        if (slot == slots.end()) slot = slots.insert(slots.end(), {key, flat(params[k].group, t.dtype)});
        move_to_partition(t, runs_of[k], slot->second, comm);
    }
    std::vector<const PyObj *> first(names.size(), nullptr);
    std::vector<int64_t> steps(names.size(), -1);
    for (size_t g = 0; g < names.size(); ++g) {
        bool seen = false, agree = true;
        for (size_t k = 0; k < params.size(); ++k) {
            if (params[k].group != g || owner[k] != me) continue;
            const PyObj *entry = rest_state->get_int_key(static_cast<int64_t>(k));
            if (!seen) first[g] = entry;
            else if ((entry == nullptr) != (first[g] == nullptr) || (entry != nullptr && !same_entry(entry, first[g]))) agree = false;
            seen = true;
        }
        steps[g] = !agree ? -2 : first[g] != nullptr ? step_count(first[g]) : -1;
    }
    agree_on_steps(steps, pp);
    auto group_entry = [&](size_t g) -> PyRef {
        if (first[g] == nullptr) return nullptr;
        auto entry = py_dict();
        for (const auto &kv : first[g]->map) entry->map.push_back(kv);
        for (const auto &[key, t] : per_element[g]) py_set(*entry, key, py_tensor(t));
        return entry;
    };
    std::vector<PyRef> entries;
    for (size_t g = 0; g < names.size(); ++g) entries.push_back(group_entry(g));

    // The model states: buffers whole; frozen parameters whole (ZeRO-1/2) or cut as ZeRO-3 cuts parameters;
    // a tied parameter named once more in shared_params. ZeRO-1/2 keep the whole module (rank 0 writes it);
    // ZeRO-3 parameters are empty there, as DeepSpeed's partitioned parameters are. Under pp each stage gives the
    // tensors it holds (the first holder's count), by name; the first stage writes them in one process's order.
    const bool model_states = stage == 3 || how.main;
    std::map<std::string, at::Tensor> module_of, fragment_of, shape_of;
    if (model_states) {
        std::set<const c10::TensorImpl *> seen;
        for (const auto &[name, p] : model.named_parameters()) {
            if (!seen.insert(p.unsafeGetTensorImpl()).second || (pp != nullptr && p.numel() == 0)) continue;
            if (index.count(name)) {
                module_of.emplace(name, stage == 3 ? at::empty({0}, p.options()) : p.detach());
                continue;
            }
            // A frozen parameter as it is kept: its float32 master where it computes in bf16 (DeepSpeed itself has
            // only the 16-bit copy; the master makes a resumed run equal the uninterrupted one).
            const at::Tensor own = engine.own_value(p);
            module_of.emplace(name, stage == 3 ? at::empty({0}, own.options()) : own);
            shape_of.emplace(name, at::tensor(p.sizes().vec(), at::kLong));
            if (stage == 3) {
                const int64_t n = p.numel(), ps = (n + world - 1) / world, lo = std::min(n, rank * ps), hi = std::min(n, lo + ps);
                at::Tensor fragment = at::zeros({ps}, own.options());
                if (hi > lo) fragment.narrow(0, 0, hi - lo).copy_(own.reshape({-1}).narrow(0, lo, hi - lo));
                fragment_of.emplace(name, fragment);
            } else {
                fragment_of.emplace(name, own);
            }
        }
        for (const auto &[name, b] : model.named_buffers())
            if (pp == nullptr || b.numel() > 0) module_of.emplace(name, b.detach());
    }

    // Under pp: each later stage sends its part to the first stage of its pp group (the same dp rank), which adds
    // it in (every element of a partition is one stage's; the others hold zeros there).
    if (pp != nullptr && how.writes) {
        if (me != 0) {
            auto out = py_dict();
            auto fp32 = py_dict();
            for (size_t g = 0; g < names.size(); ++g) py_set(*fp32, std::to_string(g), py_tensor(s.fp32[g]));
            py_set(*out, "fp32", fp32);
            for (size_t g = 0; g < names.size(); ++g)
                if (entries[g]) py_set(*out, "group." + std::to_string(g), entries[g]);
            py_set(*out, "module", named_dict(module_of));
            py_set(*out, "fragment", named_dict(fragment_of));
            py_set(*out, "shape", named_dict(shape_of));
            parallel::pp::send_stage_entries(*pp, *out, 0);
            return {};
        }
        for (int32_t from = 1; from < pp->size(); ++from) {
            const PyRef got = parallel::pp::recv_stage_entries(*pp, from);
            for (size_t g = 0; g < names.size(); ++g) {
                s.fp32[g].add_(got->get("fp32")->get(std::to_string(g))->tensor);
                const PyObj *theirs = got->get("group." + std::to_string(g));
                if (theirs == nullptr) continue;
                if (!entries[g]) { // the group's first parameters are on a later stage: its entry as a start
                    entries[g] = py_dict();
                    for (const auto &kv : theirs->map)
                        py_set(*entries[g], kv.first->s, kv.second->kind == PyObj::Kind::Tensor && kv.second->tensor.dim() == 1
                                                             ? py_tensor(at::zeros_like(kv.second->tensor))
                                                             : kv.second);
                }
                for (const auto &[key, value] : theirs->map) {
                    if (value->kind != PyObj::Kind::Tensor || value->tensor.dim() != 1) continue;
                    const PyObj *ours = entries[g]->get(key->s);
                    if (ours == nullptr) py_set(*entries[g], key->s, py_tensor(value->tensor.clone()));
                    else ours->tensor.add_(value->tensor);
                }
            }
            for (const auto &[key, into] : {std::pair<const char *, std::map<std::string, at::Tensor> *>{"module", &module_of},
                                            {"fragment", &fragment_of}, {"shape", &shape_of}})
                for (const auto &[name, value] : got->get(key)->map) into->emplace(name->s, value->tensor);
        }
    }
    if (!how.writes) return {};
    for (size_t g = 0; g < names.size(); ++g) {
        s.group_state.push_back(entries[g]);
        if (s.global_steps == 0 && entries[g]) s.global_steps = step_count(entries[g].get());
        auto options = py_dict();
        for (const auto &kv : groups->items.at(g)->map)
            if (kv.first->s != "params") options->map.push_back(kv);
        s.group_options.push_back(options);
    }
    if (model_states) {
        // One process's order: the first stage lists every name (the other stages' tensors hold no elements there).
        std::map<const c10::TensorImpl *, std::string> first_name;
        auto taken = [](const std::map<std::string, at::Tensor> &from, const std::string &name) {
            auto it = from.find(name);
            if (it == from.end()) fail(ACCEL_ERR_INTERNAL, "save_state: no stage sent \"" + name + "\" for DeepSpeed's model states");
            return it->second;
        };
        for (const auto &[name, p] : model.named_parameters()) {
            auto [it, fresh] = first_name.emplace(p.unsafeGetTensorImpl(), name);
            if (!fresh && (pp == nullptr || p.numel() > 0)) {
                s.shared_params.emplace_back(name, it->second);
                continue;
            }
            s.module.emplace_back(name, taken(module_of, name));
            if (index.count(name)) continue;
            const at::Tensor shape = taken(shape_of, name);
            s.frozen_shapes.emplace_back(name, std::vector<int64_t>(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel()));
            s.frozen_fragments.emplace_back(name, taken(fragment_of, name));
        }
        for (const auto &[name, b] : model.named_buffers()) {
            auto it = module_of.find(name);
            s.module.emplace_back(name, it != module_of.end() ? it->second : b.detach());
            s.buffer_names.push_back(name);
        }
    }
    std::vector<std::pair<std::string, PyRef>> out;
    if (model_states && (stage == 3 || main))
        out.emplace_back(ckpt::deepspeed_model_states_name(stage, rank, s.mp_rank), ckpt::deepspeed_model_states(part, s));
    out.emplace_back(ckpt::deepspeed_optim_states_name(rank, s.bf16, s.mp_rank), ckpt::deepspeed_optim_states(part, s));
    return out;
}

} // namespace accel
