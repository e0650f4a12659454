// save_state under deepspeed_plugin (ZeRO 1-3): each model and its optimizer in DeepSpeed's own layout
// (checkpointing/deepspeed_folder.hpp), as Accelerate leaves it. DeepSpeed cuts the parameters otherwise than
// accel's engine does (per group or per parameter, not per unit), so each parameter's float32 values and
// optimizer state are moved tensor by tensor (every rank, same order) from accel's pieces to DeepSpeed's
// partitions: each rank receives only the ranges of its partition that another rank holds, and nothing
// larger than the rank's own part of one tensor is ever in flight.
#include "accelerator/accelerator.hpp"

#include "checkpointing/checkpointing.hpp"
#include "checkpointing/deepspeed_folder.hpp"
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "distributed/device_mesh.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

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
    parallel::ShardedDataParallel &engine = *sharded_of(model);
    const AcceleratedOptimizer &optimizer = *optimizer_of(model);
    // Under tensor parallelism each tp rank's slices are a model of their own to DeepSpeed (as under Megatron's
    // mpu): the ZeRO partitions span the data-parallel group the engine shards over, the files carry the tp rank
    // (mp_rank_XX), and data-parallel rank 0 of each tp rank writes its model states.
    const parallel::tp::SplitModel split = parallel::tp::split_of(model);
    const auto &mesh = state_->mesh;
    if (split && mesh == nullptr) fail(ACCEL_ERR_INTERNAL, "save_state: a model split by tensor parallelism without a mesh");
    distributed::Communicator &comm = split ? *mesh->group(distributed::MeshDim::DpShardCp) : *state_->comm;
    const int stage = static_cast<int>(engine.config().zero_stage);
    const int32_t world = comm.size(), rank = comm.rank();
    const std::string tag = ckpt::deepspeed_tag(i);
    // Replicas over dp_replicate hold the same partitions: the first one writes them.
    const bool writes = !split || mesh->rank_in(distributed::MeshDim::DpReplicate) == 0;
    if (split) main = rank == 0;

    const ShardedState masters = engine.sharded_state_dict(model);
    const ShardedState state = optimizer.sharded_state_dict();
    if (masters.world_size != world || state.world_size != world)
        fail(ACCEL_ERR_INTERNAL, "save_state: DeepSpeed's layout needs the shards spread over every data-parallel process");

    // The trainable parameters group by group, and where DeepSpeed puts each one's elements on this rank.
    const auto names = optimizer.param_names_by_group();
    std::vector<ckpt::DsParam> params;
    for (size_t g = 0; g < names.size(); ++g)
        for (const auto &name : names[g]) params.push_back({name, model.find_tensor(name)->sizes().vec(), g});
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
    s.bf16 = state_->config.mixed_precision == ACCEL_MIXED_PRECISION_BF16;
    auto flat = [&](size_t g, at::ScalarType dtype) { return at::zeros({part.flat_numel(g)}, at::TensorOptions().dtype(dtype)); };
    for (size_t g = 0; g < names.size(); ++g) s.fp32.push_back(flat(g, at::kFloat));
    for (const auto &t : masters.tensors) { // the same list, in the same order, on every rank
        auto it = index.find(t.name);
        if (it == index.end()) continue; // buffers and frozen parameters: below
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
        const std::string &key = named.second;
        auto &slots = per_element.at(params.at(k).group);
        auto slot = std::find_if(slots.begin(), slots.end(), [&key](const auto &e) { return e.first == key; });
        if (slot == slots.end()) slot = slots.insert(slots.end(), {key, flat(params[k].group, t.dtype)});
        move_to_partition(t, runs_of[k], slot->second, comm);
    }
    for (size_t g = 0; g < names.size(); ++g) {
        const PyObj *first = nullptr;
        for (size_t k = 0; k < params.size(); ++k) {
            if (params[k].group != g) continue;
            const PyObj *entry = rest_state->get_int_key(static_cast<int64_t>(k));
            if (first == nullptr) first = entry;
            const bool agree = entry != nullptr && first != nullptr && entry->map.size() == first->map.size() &&
                               std::equal(entry->map.begin(), entry->map.end(), first->map.begin(),
                                          [](const auto &a, const auto &b) { return a.first->s == b.first->s && same_value(*a.second, *b.second); });
            if ((entry == nullptr) != (first == nullptr) || (entry != nullptr && !agree))
                fail(ACCEL_ERR_UNIMPLEMENTED, "save_state: the parameters of optimizer group " + std::to_string(g) +
                                                  " have taken different numbers of steps (some had no gradient), which "
                                                  "DeepSpeed's layout cannot hold (one state per group)");
        }
        if (first != nullptr) {
            auto entry = py_dict();
            for (const auto &kv : first->map) entry->map.push_back(kv);
            for (const auto &[key, t] : per_element[g]) py_set(*entry, key, py_tensor(t));
            s.group_state.push_back(entry);
            if (s.global_steps == 0) s.global_steps = step_count(first);
        } else {
            s.group_state.push_back(nullptr);
        }
        auto options = py_dict();
        for (const auto &kv : groups->items.at(g)->map)
            if (kv.first->s != "params") options->map.push_back(kv);
        s.group_options.push_back(options);
    }

    // The model states: buffers whole; frozen parameters whole (ZeRO-1/2) or cut as ZeRO-3 cuts parameters;
    // a tied parameter named once more in shared_params. ZeRO-1/2 keep the whole module (rank 0 writes it);
    // ZeRO-3 parameters are empty there, as DeepSpeed's partitioned parameters are.
    std::map<const c10::TensorImpl *, std::string> first_name;
    for (const auto &[name, p] : model.named_parameters()) {
        auto [it, fresh] = first_name.emplace(p.unsafeGetTensorImpl(), name);
        if (!fresh) {
            s.shared_params.emplace_back(name, it->second);
            continue;
        }
        if (index.count(name)) {
            s.module.emplace_back(name, stage == 3 ? at::empty({0}, p.options()) : p.detach());
            continue;
        }
        // A frozen parameter as it is kept: its float32 master where it computes in bf16 (DeepSpeed itself has
        // only the 16-bit copy; the master makes a resumed run equal the uninterrupted one).
        const at::Tensor own = engine.own_value(p);
        s.module.emplace_back(name, stage == 3 ? at::empty({0}, own.options()) : own);
        s.frozen_shapes.emplace_back(name, p.sizes().vec());
        if (stage == 3) {
            const int64_t n = p.numel(), ps = (n + world - 1) / world, lo = std::min(n, rank * ps), hi = std::min(n, lo + ps);
            at::Tensor fragment = at::zeros({ps}, own.options());
            if (hi > lo) fragment.narrow(0, 0, hi - lo).copy_(own.reshape({-1}).narrow(0, lo, hi - lo));
            s.frozen_fragments.emplace_back(name, fragment);
        } else {
            s.frozen_fragments.emplace_back(name, own);
        }
    }
    for (const auto &[name, b] : model.named_buffers()) {
        s.module.emplace_back(name, b.detach());
        s.buffer_names.push_back(name);
    }
    if (!writes) return;
    if (stage == 3 || main)
        files.push_back({tag + "/" + ckpt::deepspeed_model_states_name(stage, rank, s.mp_rank), ckpt::deepspeed_model_states(part, s),
                         nullptr, nullptr});
    files.push_back({tag + "/" + ckpt::deepspeed_optim_states_name(rank, s.bf16, s.mp_rank), ckpt::deepspeed_optim_states(part, s),
                     nullptr, nullptr});
}

} // namespace accel
