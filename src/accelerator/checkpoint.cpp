// Accelerator::save_state / load_state / save_model / register_for_checkpointing, as accelerator.py does
// them: collect the state dict of every prepared part, in Accelerate's order, and hand the files to
// src/checkpointing/ (layout, naming, formats). Loading reads and checks every file and every part's
// state first, then installs them all, so a damaged or mismatched checkpoint changes nothing.
#include "accelerator/accelerator.hpp"

#include "checkpointing/async_save.hpp"
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/deepspeed_folder.hpp"
#include "checkpointing/integrity.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "checkpointing/sharded_folder.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/json_reader.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "distributed/agreement.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "logging/logger.hpp"
#include "model/model.hpp"
#include "model/pretrained.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/stage_checkpoint.hpp"
#include "parallel/pipeline/stage_sharded_checkpoint.hpp"
#include "parallel/tensor_parallel/rng_checkpoint.hpp"
#include "parallel/tensor_parallel/sliced_source.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "precision/grad_scaler.hpp"
#include "random/random.hpp"
#include "scheduler/accelerated_scheduler.hpp"
#include "profiling/ranges.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <set>

namespace accel {

using ckpt::indexed;

namespace {

const std::string kWrapped = "module.";

// Accelerate's save_state writes a model's own keys, also under DDP; accel before 0.1 (and a state dict
// taken from a DDP-wrapped module by hand) had "module." in front. Either form loads: a key the model lacks
// that it has once "module." is removed is renamed.
TensorList match_model_keys(const Model &model, TensorList sd)
{
    for (auto &entry : sd) {
        if (entry.first.compare(0, kWrapped.size(), kWrapped) == 0 && model.find_tensor(entry.first) == nullptr &&
            model.find_tensor(entry.first.substr(kWrapped.size())) != nullptr)
            entry.first.erase(0, kWrapped.size());
    }
    return sd;
}

// Whether `src` has every tensor of the model's state dict (a tensor under two names once, by its first).
bool holds_every_tensor(const Model &model, const ShardedSource &src)
{
    std::set<const c10::TensorImpl *> seen;
    std::vector<int64_t> shape;
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &[name, t] : *list)
            if (t.defined() && seen.insert(t.unsafeGetTensorImpl()).second && !src.find(name, shape)) return false;
    return true;
}

// Accelerate's register_for_checkpointing pickles obj.state_dict(). accel's own objects are bytes; a
// plain Python value (None, bool, int, float, str, list, tuple, dict with str keys) is handed to the
// load callback as JSON text; anything else (tensors, arrays, bytes inside) is rejected by name.
void plain_to_json(const PyObj &v, std::string &out, const std::string &what)
{
    using K = PyObj::Kind;
    switch (v.kind) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.b ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float: {
        if (!std::isfinite(v.f)) fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": holds a non-finite float, which JSON cannot carry");
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", v.f);
        out += buf;
        return;
    }
    case K::Str: out += json_quote(v.s); return;
    case K::List:
    case K::Tuple:
        out += '[';
        for (size_t i = 0; i < v.items.size(); ++i) {
            if (i) out += ',';
            plain_to_json(*v.items[i], out, what);
        }
        out += ']';
        return;
    case K::Dict:
    case K::OrderedDict:
        out += '{';
        for (size_t i = 0; i < v.map.size(); ++i) {
            if (v.map[i].first->kind != K::Str)
                fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": a dict key is not a string (cannot be handed over as JSON)");
            if (i) out += ',';
            out += json_quote(v.map[i].first->s) + ":";
            plain_to_json(*v.map[i].second, out, what);
        }
        out += '}';
        return;
    default:
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": holds " +
                                             (v.kind == K::Tensor ? std::string("a tensor")
                                              : v.kind == K::Bytes ? std::string("bytes inside a container")
                                                                   : "the Python object " + v.s) +
                                             "; accel hands custom objects their bytes, or plain values as JSON");
    }
}

// Pipeline models whole for a checkpoint (WholeStages), each with the optimizers over it: one process's layout
// whatever pp saved or loads the folder; `gather_state` for a save (the optimizers' state of every parameter), then
// onto the first stage of the writer's groups only (`writes`: whether this process writes the main files; nullopt
// with save_on_each_node, where a node's writer may hold another stage: every rank whole, as before).
// `sharded`: the stages under the sharding engine instead (pp x fsdp_plugin), whose stage must be summoned first;
// their optimizers' state is joined from the engine's state dicts (joined_stage_optimizer_state), not borrowed.
template <typename WrapperOf>
std::vector<std::unique_ptr<parallel::pp::WholeStages>>
whole_pipeline_models(const std::vector<std::shared_ptr<Model>> &models,
                      const std::vector<std::shared_ptr<AcceleratedOptimizer>> &optimizers, WrapperOf &&wrapper_of,
                      bool gather_state, std::optional<bool> writes = std::nullopt, bool sharded = false)
{
    std::vector<std::unique_ptr<parallel::pp::WholeStages>> out;
    for (const auto &m : models) {
        parallel::ParallelWrapper *w = wrapper_of(*m);
        if (w == nullptr || w->pipeline() == nullptr || (w->sharded() != nullptr) != sharded) continue;
        if (sharded && w->sharded()->writes_sharded_state_dict()) continue; // each stage writes its own pieces
        std::vector<AcceleratedOptimizer *> over;
        for (const auto &o : optimizers)
            if (o->model() == m && !sharded) over.push_back(o.get());
        out.push_back(writes ? std::make_unique<parallel::pp::WholeStages>(
                                   w->pipeline(), std::move(over), gather_state,
                                   parallel::pp::WholeStages::FirstStageOnly{parallel::pp::near_writer(*m, *writes)})
                             : std::make_unique<parallel::pp::WholeStages>(w->pipeline(), std::move(over), gather_state));
    }
    return out;
}

// A pipeline stage under the sharding engine (pp x fsdp_plugin / deepspeed_plugin).
bool sharded_pipeline(parallel::ParallelWrapper *w) { return w != nullptr && w->pipeline() != nullptr && w->sharded() != nullptr; }

// A pipeline stage loads only the tensors it holds: the other stages' entries (their tensors hold no elements here)
// become empty, so nothing of them is read from the mapped files or copied.
TensorList stage_weights(const Model &model, TensorList sd)
{
    for (auto &entry : sd) {
        const at::Tensor *mine = model.find_tensor(entry.first);
        if (mine != nullptr && mine->numel() == 0 && entry.second.numel() > 0) entry.second = at::empty({0}, entry.second.options());
    }
    return sd;
}

// A sharded folder (SHARDED_STATE_DICT, saved without a pipeline) read by a pipeline stage inside the engine: the
// other stages' tensors (emptied here) read as empty, so their shapes match the stage's and nothing of them is read.
ShardedSource stage_source(const Model &model, const ShardedSource &src)
{
    ShardedSource out = src;
    out.find = [&model, find = src.find](const std::string &name, std::vector<int64_t> &shape) {
        if (!find(name, shape)) return false;
        if (const at::Tensor *mine = model.find_tensor(name); mine != nullptr && mine->numel() == 0) shape = {0};
        return true;
    };
    return out;
}

// A pipeline stage's part of one process's optimizer state dict (`names`: the parameters in its id order): the state
// of the parameters it holds; the other stages' is left out, so none of it is installed here.
PyRef stage_optimizer_state(const Model &model, const std::vector<std::string> &names, const PyObj &sd)
{
    auto out = std::make_shared<PyObj>(sd);
    for (auto &entry : out->map) {
        if (entry.first->kind != PyObj::Kind::Str || entry.first->s != "state" || !entry.second->is_dict()) continue;
        auto kept = std::make_shared<PyObj>(*entry.second);
        kept->map.clear();
        for (const auto &st : entry.second->map) {
            const PyObj &id = *st.first;
            const bool known = id.kind == PyObj::Kind::Int && id.i >= 0 && static_cast<size_t>(id.i) < names.size();
            const at::Tensor *p = known ? model.find_tensor(names[static_cast<size_t>(id.i)]) : nullptr;
            if (p == nullptr || p->numel() > 0) kept->map.push_back(st); // unknown ids: left to the optimizer's checks
        }
        entry.second = kept;
    }
    return out;
}

// Sharded models hold only their shards at rest: gathered whole for the duration of a save or a load
// (collective: every rank), then written back to the shards and freed. Those the user has summoned stay so.
class SummonWhole {
public:
    explicit SummonWhole(const std::vector<parallel::ShardedDataParallel *> &engines)
    {
        try {
            for (auto *e : engines)
                if (!e->summoned()) {
                    e->summon_full_params(true);
                    summoned_.push_back(e);
                }
        } catch (...) {
            release();
            throw;
        }
    }
    ~SummonWhole() { release(); }
    SummonWhole(const SummonWhole &) = delete;
    SummonWhole &operator=(const SummonWhole &) = delete;

private:
    void release() noexcept
    {
        for (auto *e : summoned_) {
            try {
                e->summon_full_params(false); // local: copies the shard back, frees the whole buffers
            } catch (...) {
            }
        }
        summoned_.clear();
    }
    std::vector<parallel::ShardedDataParallel *> summoned_;
};

// The models the sharding engine holds (in_engine) or the others: tensor parallelism gathers and slices them
// differently (whole_state.hpp).
template <typename EngineOf>
std::vector<const Model *> models_where(const std::vector<std::shared_ptr<Model>> &models, EngineOf &&engine_of, bool in_engine)
{
    std::vector<const Model *> out;
    for (const auto &m : models)
        if ((engine_of(*m) != nullptr) == in_engine) out.push_back(m.get());
    return out;
}

// An optimizer's trainable parameters in its state dict's id order (numbered group after group).
std::vector<std::string> state_dict_names(const AcceleratedOptimizer &optimizer)
{
    std::vector<std::string> out;
    for (const auto &group : optimizer.param_names_by_group()) out.insert(out.end(), group.begin(), group.end());
    return out;
}

// Tensor parallelism's split models and their optimizers, whole for a checkpoint (whole_state.hpp): saved and
// loaded in one process's layout, whatever tp wrote or reads the folder. Null when no model is split.
std::unique_ptr<parallel::tp::WholeForCheckpoint>
whole_split_models(const std::vector<const Model *> &models, const std::vector<std::shared_ptr<AcceleratedOptimizer>> &optimizers)
{
    std::vector<parallel::tp::WholeForCheckpoint::Part> parts;
    for (const Model *m : models) {
        if (!parallel::tp::split_of(*m)) continue;
        parallel::tp::WholeForCheckpoint::Part part{m, {}};
        for (const auto &o : optimizers)
            if (o->model().get() == m) part.optimizers.push_back(o.get());
        parts.push_back(std::move(part));
    }
    return parts.empty() ? nullptr : std::make_unique<parallel::tp::WholeForCheckpoint>(std::move(parts));
}

// DeepSpeed's layout saved under tp holds each tp rank's slices (mp_rank_XX files): inside the engine at the same tp
// size each rank reads its own tp rank's files, by range; a folder saved without tp holds whole tensors, which a
// model outside the engine reads whole. Otherwise (another tp size) the folder is read as one process's state
// (read_deepspeed_whole: the slices joined) and cut as a FULL folder is.
bool deepspeed_per_rank(int32_t saved_tp, int32_t tp, bool in_engine)
{
    return in_engine ? saved_tp == tp : saved_tp == 1;
}

// How the tensors of a sharded state dict of `model` (or of `optimizer`'s state, "state.{id}.{key}") are split by
// tensor parallelism; `what` names the folder in messages.
parallel::tp::SlicingOf tp_slicing(const Model &model, const AcceleratedOptimizer *optimizer, const std::string &what)
{
    auto by_name = parallel::tp::slicing_by_name(model);
    return optimizer ? parallel::tp::optimizer_slicing(std::move(by_name), state_dict_names(*optimizer), what)
                     : parallel::tp::model_slicing(std::move(by_name));
}

// SHARDED_STATE_DICT of a model split by tensor parallelism inside the engine: its pieces are of this tp rank's
// slices (sliced_source.hpp). Null for another model (or one not split).
std::unique_ptr<ckpt::TpSave> tp_pieces(const Model &model, const ShardedState &state, const AcceleratedOptimizer *optimizer)
{
    if (!parallel::tp::split_of(model)) return nullptr;
    return std::make_unique<ckpt::TpSave>(parallel::tp::tp_save(model, state, tp_slicing(model, optimizer, "save_state")));
}

// SHARDED_STATE_DICT files of a pipeline stage under the engine (add_sharded_files): its pieces as part of the whole
// model's (whole_model_pieces). The first replica of each stage (HSDP) writes them as rank{stage * W + r} (under tp
// each tp rank its own, rank{(stage * W + r) * tp + tp rank}), the other replicas none (an index past the layout's
// world, which add_sharded_files skips). Under tp the split of the tensors the stage holds (the other stages' are
// empty here, no slices), joined over the stages by whole_model_pieces.
void add_stage_pieces(std::vector<ckpt::CheckpointFile> &files, const std::string &folder, const ShardedState &mine,
                      const Model &model, const AcceleratedOptimizer *optimizer, parallel::pp::PipelineParallel &pipeline,
                      const distributed::DeviceMesh *mesh, bool main)
{
    ShardedState held = mine;
    held.tensors.clear();
    for (const auto &t : mine.tensors)
        if (std::find(t.shape.begin(), t.shape.end(), 0) == t.shape.end()) held.tensors.push_back(t);
    const auto tp = tp_pieces(model, held, optimizer);
    const ShardedState st = parallel::pp::whole_model_pieces(pipeline, mine, main, tp.get());
    const bool first_replica = mesh == nullptr || mesh->rank_in(distributed::MeshDim::DpReplicate) == 0;
    const int64_t writer = tp ? st.rank * int64_t{tp->size} + tp->rank : st.rank;
    ckpt::add_sharded_files(files, folder, st, first_replica ? writer : std::numeric_limits<int64_t>::max(), main, tp.get());
}

// A sharded folder read by a model split by tensor parallelism inside the engine: as this tp rank's slices of its
// whole tensors (whatever mesh saved it).
ShardedSource tp_sliced(const ShardedSource &src, const Model &model, const AcceleratedOptimizer *optimizer, const std::string &what)
{
    const parallel::tp::SplitModel split = parallel::tp::split_of(model);
    return parallel::tp::sliced_source(src, tp_slicing(model, optimizer, what), split.group->rank(), split.group->size());
}

} // namespace

bool Accelerator::writes_main_files() const
{
    // Rank 0 writes the "main-process" files; with save_on_each_node every node's local rank 0 does.
    const auto &c = state_->config;
    return c.project.save_on_each_node ? c.topology.local_rank == 0 : state_->process_index() == 0;
}

size_t Accelerator::register_for_checkpointing(CheckpointObject object)
{
    custom_objects_.push_back(std::move(object));
    return custom_objects_.size() - 1;
}

std::vector<int64_t> Accelerator::checkpoint_writers() const
{
    const auto &c = state_->config;
    const int64_t first = c.project.save_on_each_node ? state_->process_index() - c.topology.local_rank : 0;
    const int64_t count = c.project.save_on_each_node ? c.topology.local_world_size : state_->num_processes();
    std::vector<int64_t> out;
    for (int64_t i = first; i < first + count; ++i) out.push_back(i);
    return out;
}

void Accelerator::finish_async_save()
{
    if (!pending_save_) return;
    std::unique_ptr<ckpt::AsyncCheckpoint> pending = std::move(pending_save_);
    pending->wait();
}

void Accelerator::wait_for_checkpoint()
{
    if (!pending_save_) return;
    // Every process waits for its own part first, then for the others (the main process's part ends with
    // the folder published); a failure is reported after the barrier, so no process is left waiting.
    std::exception_ptr error;
    try {
        finish_async_save();
    } catch (...) {
        error = std::current_exception();
    }
    wait_for_everyone();
    if (error) std::rethrow_exception(error);
}

std::string Accelerator::save_state(const char *output_dir, const config::SaveStateOptions &options)
{
    profiling::Range range(profiling::kSaveState);
    wait_for_checkpoint(); // the previous asynchronous save, published before this one is named
    for (const auto &m : models_) {
        // save_on_each_node: each node's writer gets the whole model (FULL_STATE_DICT: the stages joined onto every
        // writer, whichever stage it holds). A layout of every rank's pieces would leave each node's folder with only
        // its own ranks' pieces: refused.
        if (state_->config.project.save_on_each_node && sharded_pipeline(wrapper_of(*m)) &&
            (sharded_of(*m)->writes_sharded_state_dict() || deepspeed_layout(*m)))
            fail(ACCEL_ERR_UNIMPLEMENTED, "save_state: project save_on_each_node with parallelism_config.pp_size > 1 and " +
                                              std::string(deepspeed_layout(*m) ? "deepspeed_plugin"
                                                                               : "fsdp_plugin.state_dict_type SHARDED_STATE_DICT") +
                                              " is not supported yet (each node's folder would hold only its own ranks' "
                                              "pieces); fsdp_plugin's FULL_STATE_DICT is");
    }
    auto engine_of = [this](const Model &m) { return sharded_of(m); };
    // A pipeline's stages filled in first (under pp x tp each rank's tp slices of them), then gathered over tp.
    const auto pp_whole = whole_pipeline_models(
        models_, optimizers_, [this](const Model &m) { return wrapper_of(m); }, true,
        state_->config.project.save_on_each_node ? std::nullopt : std::optional<bool>(writes_main_files()));
    // Split models inside the engine are gathered over tp once the engine has gathered them (below).
    const auto tp_whole = whole_split_models(models_where(models_, engine_of, false), optimizers_);
    const ckpt::SaveTarget target = ckpt::save_target(state_->config.project, output_dir, project_iteration_);
    const bool main = writes_main_files();
    // The state is gathered here, on the calling thread (optimizer state, user callbacks); the files are
    // serialized afterwards, concurrently. Tensors are referenced, not copied.
    std::vector<ckpt::CheckpointFile> files;
    auto object = [&files](std::string name, PyRef obj) { files.push_back({std::move(name), std::move(obj), nullptr, nullptr}); };
    // Sharded training saves the FULL state dict by default, in the layout DDP writes: the weights whole
    // (every rank gathers them until the files are written), the optimizer state joined from every rank's
    // shard. With SHARDED_STATE_DICT every rank writes its own pieces instead: nothing is gathered.
    // Under deepspeed_plugin each model and its optimizer go into DeepSpeed's layout instead (every rank
    // its partition; deepspeed_checkpoint.cpp).
    std::vector<parallel::ShardedDataParallel *> gathered;
    bool sharded_optimizers = false;
    for (const auto &[m, w] : wrappers_) {
        if (w->writes_sharded_state_dict() || (sharded_pipeline(w.get()) && w->sharded()->writes_sharded_state_dict()))
            sharded_optimizers = true;
        else if (w->sharded() != nullptr && (!deepspeed_layout(*m) || w->sharded()->shards_frozen()))
            gathered.push_back(w->sharded()); // DeepSpeed's layout cuts frozen parameters per parameter: from whole ones
    }
    SummonWhole whole(gathered);
    // pp x sharding: each stage whole now (summoned), the other stages' filled in on the writer's first stage (under
    // save_on_each_node on every rank: a node's writer may hold any stage). Not under DeepSpeed's layout, whose
    // stages send their partitions to the first stage instead (deepspeed_save.hpp).
    const auto pp_sharded_whole = whole_pipeline_models(
        models_, {}, [this](const Model &m) { return deepspeed_layout(m) ? nullptr : wrapper_of(m); }, false,
        state_->config.project.save_on_each_node ? std::nullopt : std::optional<bool>(writes_main_files()), true);
    const int64_t rank = state_->process_index();
    std::string latest;
    for (size_t i = 0; i < models_.size(); ++i)
        if (deepspeed_layout(*models_[i])) {
            add_deepspeed_files(files, i, main);
            latest = ckpt::deepspeed_tag(i); // DeepSpeed's `latest` names the last tag saved
        }
    if (main && !latest.empty()) {
        files.push_back({"latest", nullptr, nullptr, std::make_shared<const std::string>(latest)});
        files.push_back({"zero_to_fp32.py", nullptr, nullptr, std::make_shared<const std::string>(ckpt::zero_to_fp32_script())});
    }
    std::vector<PyRef> optimizer_states(optimizers_.size());
    for (size_t i = 0; i < optimizers_.size(); ++i) {
        if (deepspeed_layout(*optimizers_[i]->model())) continue;
        if (sharded_optimizers && optimizers_[i]->is_sharded()) {
            const ShardedState st = optimizers_[i]->sharded_state_dict();
            if (parallel::ParallelWrapper *w = wrapper_of(*optimizers_[i]->model()); sharded_pipeline(w)) {
                add_stage_pieces(files, ckpt::sharded_optimizer_folder(i), st, *optimizers_[i]->model(), optimizers_[i].get(),
                                 *w->pipeline(), state_->mesh.get(), main);
            } else {
                const auto tp = tp_pieces(*optimizers_[i]->model(), st, optimizers_[i].get());
                ckpt::add_sharded_files(files, ckpt::sharded_optimizer_folder(i), st, rank, main, tp.get());
            }
        }
        else if (main || optimizers_[i]->is_sharded())
            optimizer_states[i] = optimizers_[i]->state_dict(); // collective when sharded
        // TP inside the engine: its state is per parameter now, shaped as this rank's tp slices; joined over tp.
        const Model &m = *optimizers_[i]->model();
        if (optimizer_states[i] && sharded_of(m) != nullptr && parallel::tp::split_of(m))
            optimizer_states[i] = parallel::tp::joined_optimizer_state(m, *optimizer_states[i], state_dict_names(*optimizers_[i]));
        // pp x sharding: the stage's state (whole over tp by now, the same on every rank of the stage's tp group),
        // joined with the other stages' on the writer (one process's state dict); only the writer's pp group joins.
        if (optimizer_states[i] && sharded_pipeline(wrapper_of(m)))
            optimizer_states[i] = parallel::pp::joined_stage_optimizer_state(*wrapper_of(m)->pipeline(), optimizer_states[i], main);
    }
    // Then the engine's split models whole (their parameters, views of the engine's gathered buffers, written
    // back into them afterwards, before the engine writes its shards back).
    // (DeepSpeed's layout and SHARDED_STATE_DICT keep each tp rank's slices: their models stay split.)
    const auto tp_engine_whole = whole_split_models(models_where(models_, [this](const Model &m) {
        auto *e = sharded_of(m);
        return deepspeed_layout(m) || (e != nullptr && e->writes_sharded_state_dict()) ? nullptr : e;
    }, true), {});
    for (size_t i = 0; i < models_.size(); ++i)
        if (auto *e = sharded_of(*models_[i]); e != nullptr && e->writes_sharded_state_dict()) {
            const ShardedState st = e->sharded_state_dict(*models_[i]);
            if (parallel::ParallelWrapper *w = wrapper_of(*models_[i]); sharded_pipeline(w)) {
                add_stage_pieces(files, ckpt::sharded_model_folder(i), st, *models_[i], nullptr, *w->pipeline(),
                                 state_->mesh.get(), main);
                continue;
            }
            const auto tp = tp_pieces(*models_[i], st, nullptr);
            ckpt::add_sharded_files(files, ckpt::sharded_model_folder(i), st, rank, main, tp.get());
        }
    // 1. model weights, 2. optimizers, 3. schedulers (main process).
    if (main) {
        for (size_t i = 0; i < models_.size(); ++i) {
            if (auto *e = sharded_of(*models_[i]); e != nullptr && (e->writes_sharded_state_dict() || deepspeed_layout(*models_[i])))
                continue;
            const bool safe = options.safe_serialization;
            // Keys without "module." under DDP too: Accelerator._models holds the model as it was before DDP
            // wrapped it (0.24.1 and 1.x alike), and its load_state loads into that.
            auto sd = std::make_shared<TensorList>(models_[i]->state_dict(/*dedupe_shared=*/safe));
            if (safe) {
                files.push_back({ckpt::weights_name(i, true), nullptr, sd, nullptr});
            } else {
                auto d = py_ordered_dict();
                for (const auto &[k, t] : *sd) py_set(*d, k, py_tensor(t));
                object(ckpt::weights_name(i, false), d);
            }
        }
        for (size_t i = 0; i < optimizers_.size(); ++i)
            if (optimizer_states[i]) object(indexed("optimizer", ".bin", i), optimizer_states[i]);
        for (size_t i = 0; i < schedulers_.size(); ++i) object(indexed("scheduler", ".bin", i), schedulers_[i]->state_dict());
    }
    // 4. data-loader positions, 5. scaler, 6. RNG states (every process).
    for (size_t i = 0; i < dataloaders_.size(); ++i) object(indexed("dl_state_dict", ".bin", i), dataloaders_[i]->state_dict());
    if (GradScaler *s = scaler()) object("scaler.pt", s->state_dict());
    {
        auto d = py_dict();
        py_set(*d, "step", py_int(state_->step));
        const PyRef rng = rng_state_dict();
        for (const auto &kv : rng->map) d->map.push_back(kv);
        parallel::tp::add_tracker_states(*d, models_); // tp dropout's generators, as Megatron's checkpoints keep them
        object(ckpt::random_states_name(state_->process_index()), d);
    }
    // 7. registered custom objects (main process).
    if (main)
        for (size_t i = 0; i < custom_objects_.size(); ++i)
            object(ckpt::custom_checkpoint_name(i), py_bytes(custom_objects_[i].save()));

    if (options.async_save) {
        // Copied now (before the gathered weights are released and training changes anything), written on
        // a background thread.
        ckpt::stage_files(files);
        ckpt::PreparedCheckpoint prepared = ckpt::prepare_checkpoint(target, main);
        try {
            wait_for_everyone();
            run_state_hooks(true, prepared.tmp); // on this thread: the hooks are the caller's code
        } catch (...) {
            ckpt::abandon_checkpoint(prepared);
            throw;
        }
        pending_save_ = std::make_unique<ckpt::AsyncCheckpoint>(std::move(prepared), std::move(files),
                                                                state_->process_index(), checkpoint_writers(),
                                                                distributed::init_timeout(state_->config));
    } else {
        ckpt::write_checkpoint(target, files, main, [this] { wait_for_everyone(); },
                               [this](const std::string &tmp) { run_state_hooks(true, tmp); });
    }
    project_iteration_ += 1;
    return target.dir;
}

std::string Accelerator::load_state(const char *input_dir, const config::LoadStateOptions &options)
{
    profiling::Range range(profiling::kLoadState);
    wait_for_checkpoint(); // an asynchronous save in progress may be the one to load
    const auto &project = state_->config.project;
    const std::vector<std::string> candidates = ckpt::load_sources(project, input_dir);
    // Accelerate loads into what is prepared and ignores the rest: with nothing prepared, a folder's weights
    // and optimizer state would be dropped without a word (the RNG states alone still load).
    if (models_.empty() && optimizers_.empty() && schedulers_.empty() && dataloaders_.empty())
        if (auto parts = ckpt::prepared_part_entries(candidates.front()); !parts.empty()) {
            std::string names;
            for (const auto &p : parts) names += (names.empty() ? "" : ", ") + p;
            fail(ACCEL_ERR_FAILED_PRECONDITION, "load_state: \"" + candidates.front() + "\" holds " + names +
                                                    ", but nothing is prepared to load them into; call prepare first");
        }
    for (size_t c = 0;; ++c) {
        run_state_hooks(false, candidates[c]); // outside the try: a hook's failure is not a damaged folder
        try {
            // A pipeline stage loads only its own tensors and their optimizer state (load_folder: stage_weights,
            // stage_optimizer_state), from one process's files whatever pp saved them.
            // Loaded into the whole tensors, then each rank keeps its slices of them. Split models inside the
            // engine instead take their slices of the files' tensors (load_folder).
            const auto tp_whole = whole_split_models(models_where(models_, [this](const Model &m) { return sharded_of(m); }, false),
                                                     optimizers_);
            load_folder(candidates[c], options);
        } catch (const distributed::Rejected &e) {
            // Automatic naming: a newest checkpoint that is damaged or incomplete (every process agreed, so every
            // process moves on alike) gives way to the one before it. A folder named by the caller does not.
            const bool damaged = e.code() == ACCEL_ERR_DATA_LOSS || e.code() == ACCEL_ERR_NOT_FOUND;
            if (input_dir != nullptr || !damaged || c + 1 == candidates.size()) throw;
            if (state_->process_index() == 0)
                logging::log_as(ACCEL_LOG_WARNING, 0, state_->num_processes(),
                                logging::printf_string("load_state: skipping %s, which cannot be loaded (%s: %s); trying %s",
                                                       candidates[c].c_str(), accel_status_name(e.code()), e.what(),
                                                       candidates[c + 1].c_str()));
            continue;
        }
        // The next automatic checkpoint follows the newest there is (a skipped one stays, for inspection).
        if (project.automatic_checkpoint_naming && input_dir == nullptr) {
            if (auto n = ckpt::first_number(basename_of(candidates.front()))) project_iteration_ = std::max(project_iteration_, *n + 1);
        }
        return candidates[c];
    }
}

void Accelerator::load_folder(const std::string &dir, const config::LoadStateOptions &options)
{
    auto path = [&dir](const std::string &name) { return join(dir, name); };

    // Phase 1: read every file and check it against its part; nothing changes yet. The weights and
    // optimizer state (nearly all the bytes) are only scheduled into `batch`: straight from the files
    // into the tensors, on several threads, once everything has passed.
    // A sharded state dict (a folder of pieces from every rank of the saving run) loads whatever the number
    // of processes now. A sharded model (not summoned) reads only its rank's pieces, straight into its
    // shards (`range_loads`, no gathering); any other model reads each tensor whole.
    // Every process reads its files, then all agree (one collective) before the first collective of the load
    // and again before anything is applied: a file one process cannot use fails the load on every process.
    std::vector<TensorList> weights(models_.size());
    std::vector<ApplyState> range_loads;
    std::vector<parallel::ShardedDataParallel *> whole_engines;
    std::vector<bool> by_range(models_.size(), false);
    // DeepSpeed's layout (a tag folder per model, holding its optimizer's files too) reads the same way.
    std::vector<std::optional<ckpt::DsFolder>> deepspeed(models_.size());
    std::vector<std::optional<ckpt::DsWhole>> deepspeed_whole(models_.size()); // saved at another tp size
    std::vector<std::function<ApplyState(const CopyFn &)>> optimizer_loads;
    std::vector<ApplyState> apply;
    std::vector<std::string> custom;
    std::exception_ptr failure;
    ckpt::TrustScope trusted; // files checked against the folder's record are not checked again
    try {
        // Every file save_state recorded, as recorded: each process checks the top-level files it reads (every
        // one but the other processes' RNG states); the SHARDED and DeepSpeed sub-folders check theirs when read.
        ckpt::verify_folder_manifest(dir, [this](const std::string &name) {
            return name.rfind("random_states_", 0) != 0 || name == ckpt::random_states_name(state_->process_index());
        });
        for (size_t i = 0; i < models_.size(); ++i) {
            std::string sharded = path(ckpt::sharded_model_folder(i));
            auto *e = sharded_of(*models_[i]);
            // TP inside the engine: this rank's tp slices of the whole tensors, loaded as the engine loads any.
            const parallel::tp::SplitModel split = parallel::tp::split_of(*models_[i]);
            const bool split_in_engine = e != nullptr && split;
            if (const std::string ds = ckpt::deepspeed_load_folder(dir, i); ckpt::is_deepspeed_folder(ds)) {
                // pp x tp under DeepSpeed: saving is refused (deepspeed_save.hpp), and so is loading, untested.
                if (split && sharded_pipeline(wrapper_of(*models_[i])) && deepspeed_layout(*models_[i]))
                    fail(ACCEL_ERR_UNIMPLEMENTED, "load_state: parallelism_config.pp_size > 1 with tp_size > 1 under "
                                                  "deepspeed_plugin is not supported yet (" + ds + "); without tp it is");
                // Saved under tp: this tp rank's files hold its slices, loaded as they are (no slicing below).
                if (deepspeed_per_rank(ckpt::deepspeed_mp_world(ds), split ? split.group->size() : 1, e != nullptr)) {
                    deepspeed[i] = ckpt::read_deepspeed_folder(ds, split_in_engine ? split.group->rank() : 0);
                    sharded = ds;
                } else {
                    deepspeed_whole[i] = ckpt::read_deepspeed_whole(ds);
                }
            }
            const bool pieces = deepspeed[i] || ckpt::is_sharded_folder(sharded);
            ShardedSource piece_src = deepspeed[i] ? deepspeed[i]->model : pieces ? ckpt::sharded_source(sharded) : ShardedSource{};
            if (split_in_engine && pieces && !deepspeed[i]) piece_src = tp_sliced(piece_src, *models_[i], nullptr, sharded);
            if (pieces && sharded_pipeline(wrapper_of(*models_[i]))) piece_src = stage_source(*models_[i], piece_src);
            if (!pieces || e == nullptr || e->summoned())
                weights[i] = match_model_keys(*models_[i], pieces               ? ckpt::read_source_tensors(piece_src)
                                                           : deepspeed_whole[i] ? deepspeed_whole[i]->model
                                                                                : ckpt::read_weights(dir, i));
            if (split_in_engine && !deepspeed[i]) weights[i] = parallel::tp::sliced_weights(*models_[i], std::move(weights[i]));
            if (parallel::ParallelWrapper *w = wrapper_of(*models_[i]); w != nullptr && w->pipeline() != nullptr)
                weights[i] = stage_weights(*models_[i], std::move(weights[i]));
            if (e == nullptr || e->summoned()) continue;
            // A sharded model takes its pieces by range from any layout (a whole tensor is a source of one
            // piece): nothing gathered. A whole-model file missing some of the model's tensors (loadable when
            // not strict) goes through the gathered model instead.
            const ShardedSource src = pieces ? piece_src : ckpt::tensor_source(weights[i]);
            if (!pieces && !holds_every_tensor(*models_[i], src)) continue;
            auto [apply, names] = e->load_sharded_state_dict(*models_[i], src);
            if (options.strict)
                for (const auto &name : src.names())
                    if (std::find(names.begin(), names.end(), name) == names.end())
                        fail(ACCEL_ERR_INVALID_ARGUMENT, "load_state: " + (pieces ? sharded : dir) + " holds tensor \"" +
                                                             name + "\", which the model does not have (strict loading)");
            range_loads.push_back(std::move(apply));
            by_range[i] = true;
        }
        for (size_t i = 0; i < models_.size(); ++i)
            if (auto *e = sharded_of(*models_[i]); e != nullptr && !by_range[i]) whole_engines.push_back(e);
        for (size_t i = 0; i < optimizers_.size(); ++i) {
            AcceleratedOptimizer &o = *optimizers_[i];
            const std::string sharded = path(ckpt::sharded_optimizer_folder(i));
            // Under DeepSpeed an optimizer's state lies in its model's tag folder.
            const auto m = static_cast<size_t>(std::find(models_.begin(), models_.end(), o.model()) - models_.begin());
            if (m < models_.size() && deepspeed[m]) {
                const ckpt::DsFolder &ds = *deepspeed[m];
                const std::string what = path(ckpt::deepspeed_tag(m));
                optimizer_loads.push_back([&o, &ds, what](const CopyFn &copy) {
                    return o.load_sharded_state_dict(*ds.optimizer_rest, ds.optimizer, what, copy);
                });
            } else if (ckpt::is_sharded_folder(sharded)) {
                PyRef rest = ckpt::read_sharded_rest(sharded);
                ShardedSource src = ckpt::sharded_source(sharded);
                if (o.is_sharded() && parallel::tp::split_of(*o.model())) src = tp_sliced(src, *o.model(), &o, sharded);
                optimizer_loads.push_back([&o, rest, src, sharded](const CopyFn &copy) {
                    return o.load_sharded_state_dict(*rest, src, sharded, copy);
                });
            } else {
                // DeepSpeed's tp layout read at another tp size gives one process's state dict, as optimizer.bin does.
                const bool ds_whole = m < models_.size() && deepspeed_whole[m];
                const std::string name = ds_whole ? path(ckpt::deepspeed_tag(m)) : path(indexed("optimizer", ".bin", i));
                PyRef file = ds_whole ? deepspeed_whole[m]->optimizer : ckpt::read_object(dir, indexed("optimizer", ".bin", i), true);
                if (o.is_sharded() && parallel::tp::split_of(*o.model()))
                    file = parallel::tp::sliced_optimizer_state(*o.model(), *file, state_dict_names(o));
                if (parallel::ParallelWrapper *w = wrapper_of(*o.model()); w != nullptr && w->pipeline() != nullptr)
                    file = stage_optimizer_state(*o.model(), state_dict_names(o), *file);
                optimizer_loads.push_back([&o, file, name](const CopyFn &copy) { return o.load_state_dict(*file, name, copy); });
            }
        }
        for (size_t i = 0; i < schedulers_.size(); ++i) {
            const std::string name = indexed("scheduler", ".bin", i);
            apply.push_back(schedulers_[i]->load_state_dict(*ckpt::read_object(dir, name, true), path(name)));
        }
        // A file that is missing makes the resume inexact: said, as the run goes on (Accelerate 0.2x folders
        // have no loader positions; their users skip the batches seen themselves).
        auto inexact = [this, &dir](const std::string &name, const char *consequence) {
            logging::log_as(ACCEL_LOG_WARNING, 0, state_->num_processes(),
                            "load_state: " + dir + " has no " + name + ": " + consequence +
                                ", so training will not continue exactly as it would have");
        };
        for (size_t i = 0; i < dataloaders_.size(); ++i) {
            const std::string name = indexed("dl_state_dict", ".bin", i);
            if (PyRef d = ckpt::read_object(dir, name, false)) apply.push_back(dataloaders_[i]->load_state_dict(*d, path(name)));
            else if (state_->process_index() == 0)
                inexact(name, "the loader starts its pass from the beginning (skip the batches already seen with skip_first_batches)");
        }
        if (GradScaler *s = scaler())
            if (PyRef d = ckpt::read_object(dir, "scaler.pt", false)) apply.push_back(s->load_state_dict(*d, path("scaler.pt")));
        {
            const std::string name = ckpt::random_states_name(state_->process_index());
            if (PyRef d = ckpt::read_object(dir, name, false)) {
                if (!d->is_dict()) fail(ACCEL_ERR_DATA_LOSS, path(name) + ": not a dict");
                apply.push_back(parallel::tp::take_tracker_states(*d, models_, path(name)));
                apply.push_back(load_rng_state_dict(*d, path(name)));
                // 1.x's save_state stores accumulate()'s step; 0.2x's has none and its load_state leaves the step
                // as it is, as 1.x does when the key is missing.
                if (d->get("step") != nullptr) {
                    const int64_t step = sd_int(*d, "step", path(name));
                    apply.push_back([this, step] { state_->step = step; });
                }
            } else {
                inexact(name, "this process's random generators are not restored");
            }
        }
        {
            const size_t count = ckpt::count_custom_checkpoints(dir);
            if (count != custom_objects_.size())
                fail(ACCEL_ERR_FAILED_PRECONDITION, "load_state: \"" + dir + "\" holds " + std::to_string(count) +
                                                        " custom checkpoint files but " +
                                                        std::to_string(custom_objects_.size()) +
                                                        " objects are registered for checkpointing");
            for (size_t i = 0; i < count; ++i) {
                const std::string name = ckpt::custom_checkpoint_name(i);
                PyRef v = ckpt::read_object(dir, name, true);
                if (v->kind == PyObj::Kind::Bytes) {
                    custom.push_back(v->s);
                } else {
                    std::string json;
                    plain_to_json(*v, json, path(name));
                    custom.push_back(std::move(json));
                }
            }
        }
    } catch (...) {
        failure = std::current_exception();
    }
    distributed::agree(state_->comm.get(), failure);
    // The models' and optimizers' checks (names, shapes, hyperparameters) run while their copies are
    // scheduled; nothing changes until every one has passed.
    ckpt::CopyBatch batch;
    CopyFn schedule = [&batch](const at::Tensor &dst, const at::Tensor &src) { batch.add(dst, src); };
    SummonWhole whole(whole_engines); // sharded weights loaded whole: then each rank keeps its shard
    std::vector<ApplyState> install_optimizers;
    try {
        for (size_t i = 0; i < weights.size(); ++i) {
            if (by_range[i]) continue;
            // Not strict: what did not match is said (main process), as transformers' loaders do.
            const LoadReport report = models_[i]->load_state_dict(weights[i], options.strict, schedule);
            if (!report.empty() && state_->process_index() == 0)
                logging::log_as(ACCEL_LOG_WARNING, 0, state_->num_processes(),
                                "load_state: " + dir + ", model " + std::to_string(i) + ": " + report.text());
        }
        for (auto &load : optimizer_loads) install_optimizers.push_back(load(schedule));
    } catch (...) {
        failure = std::current_exception();
    }
    distributed::agree(state_->comm.get(), failure);

    // Phase 2: apply, in Accelerate's order.
    batch.run();
    for (auto &f : range_loads) f();
    for (auto &f : install_optimizers) f();
    for (auto &f : apply) f();
    for (size_t i = 0; i < custom.size(); ++i) custom_objects_[i].load(custom[i]);
}

void Accelerator::save_model(const Model &model, const std::string &save_directory,
                             const config::SaveModelOptions &options)
{
    profiling::Range range(profiling::kSaveModel);
    const std::string dir = normalize_path(save_directory);
    if (exists(dir) && !is_dir(dir))
        fail(ACCEL_ERR_ALREADY_EXISTS, "save_directory: \"" + dir + "\" is a file, not a folder");
    // A sharded model's weights are gathered whole first (every rank calls save_model, as in Accelerate).
    std::unique_ptr<SummonWhole> whole;
    if (auto *e = sharded_of(model)) whole = std::make_unique<SummonWhole>(std::vector<parallel::ShardedDataParallel *>{e});
    parallel::ParallelWrapper *wrapper = wrapper_of(model);
    // A pipeline model: each stage writes its own tensors (under pp x tp gathered over the stage's tp group first).
    if (parallel::pp::PipelineParallel *pipeline = wrapper != nullptr ? wrapper->pipeline() : nullptr;
        pipeline != nullptr && parallel::pp::saves_by_stage(options, state_->config.project.save_on_each_node)) {
        const auto tp_whole = whole_split_models({&model}, {});
        return parallel::pp::save_model_by_stage(model, *pipeline, dir, options, writes_main_files());
    }
    // Otherwise its stages are filled in from each other (every rank of the pp group calls save_model)...
    const parallel::pp::WholeStages pp_whole(wrapper != nullptr ? wrapper->pipeline() : nullptr);
    // ...then a tensor-parallel model's weights are gathered over the tp group the same way (one rank writes them).
    const auto tp_whole = whole_split_models({&model}, {});
    if (!writes_main_files()) return;
    // The weights, and config.json for models that have a transformers counterpart: save_pretrained's folder.
    write_pretrained(model, dir, options);
}

LoadReport load_checkpoint_in_model(Model &model, const std::string &path, const config::LoadCheckpointOptions &options)
{
    return load_checkpoint_tensors(model, ckpt::read_model_weights(normalize_path(path)), options);
}

LoadReport load_checkpoint_tensors(Model &model, TensorList tensors, const config::LoadCheckpointOptions &options)
{
    TensorList all = match_model_keys(model, std::move(tensors));
    if (options.dtype) {
        at::ScalarType to = *options.dtype == ACCEL_DTYPE_FLOAT64    ? at::kDouble
                            : *options.dtype == ACCEL_DTYPE_FLOAT16  ? at::kHalf
                            : *options.dtype == ACCEL_DTYPE_BFLOAT16 ? at::kBFloat16
                                                                       : at::kFloat;
        for (auto &e : all)
            if (at::isFloatingType(e.second.scalar_type())) e.second = e.second.to(to);
    }
    ckpt::CopyBatch batch;
    LoadReport report =
        model.load_state_dict(all, options.strict, [&batch](const at::Tensor &dst, const at::Tensor &src) { batch.add(dst, src); });
    batch.run();
    return report;
}

} // namespace accel
