#include "checkpointing/checkpointing.hpp"

#include "accelerator/accelerator.hpp"
#include "checkpointing/files.hpp"
#include "checkpointing/json_reader.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "checkpointing/merge_weights.hpp"
#include "checkpointing/optimizer_state.hpp"
#include "checkpointing/parallel.hpp"
#include "checkpointing/temp_folder.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/error.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "precision/grad_scaler.hpp"
#include "scheduler/accelerated_scheduler.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace accel::ckpt {

namespace {

// Accelerate's suffix rule: i = 0 no suffix, else "_{i}" before the extension.
std::string indexed(const std::string &stem, const std::string &ext, size_t i)
{
    return i == 0 ? stem + ext : stem + "_" + std::to_string(i) + ext;
}

const char *kSafeWeights = "model";
const char *kPickleWeights = "pytorch_model";

bool writes_main_files(const AcceleratorState &s)
{
    // Rank 0 writes the "main-process" files; with save_on_each_node every node's local rank 0 does.
    return s.config.project.save_on_each_node ? s.config.topology.local_rank == 0 : s.process_index() == 0;
}

PyRef tensors_to_ordered_dict(const TensorList &tensors)
{
    auto d = py_ordered_dict();
    for (const auto &[k, t] : tensors) py_set(*d, k, py_tensor(t.detach()));
    return d;
}

TensorList tensors_from_pickle(const PyObj &obj, const std::string &what)
{
    const PyObj *sd = &obj;
    if (!sd->is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a state dict (expected a dict of tensors)");
    TensorList out;
    for (const auto &[k, v] : sd->map) {
        if (k->kind != PyObj::Kind::Str) fail(ACCEL_ERR_DATA_LOSS, what + ": a state-dict key is not a string");
        if (v->kind != PyObj::Kind::Tensor)
            fail(ACCEL_ERR_DATA_LOSS, what + ": the value of \"" + k->s + "\" is not a tensor");
        out.emplace_back(k->s, v->tensor);
    }
    return out;
}

PyRef scheduler_state_dict(const AcceleratedScheduler &s)
{
    auto lrs = [](const std::vector<double> &v) {
        auto l = py_list();
        for (double x : v) l->items.push_back(py_float(x));
        return l;
    };
    auto d = py_dict();
    py_set(*d, "base_lrs", lrs(s.base_lrs()));
    py_set(*d, "last_epoch", py_int(s.step_count()));
    py_set(*d, "verbose", py_bool(false));
    py_set(*d, "_step_count", py_int(s.step_count() + 1));
    py_set(*d, "_get_lr_called_within_step", py_bool(false));
    py_set(*d, "_last_lr", lrs(s.last_lrs()));
    auto lambdas = py_list();
    for (size_t i = 0; i < s.base_lrs().size(); ++i) lambdas->items.push_back(py_none());
    py_set(*d, "lr_lambdas", lambdas);
    return d;
}

std::vector<double> float_list(const PyObj *v, const std::string &what, const char *key, size_t n)
{
    if (v == nullptr || v->kind != PyObj::Kind::List)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is missing or not a list");
    std::vector<double> out;
    for (const auto &x : v->items) {
        if (x->kind == PyObj::Kind::Float) out.push_back(x->f);
        else if (x->kind == PyObj::Kind::Int) out.push_back(static_cast<double>(x->i));
        else fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" holds a non-number");
    }
    if (out.size() != n)
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": \"" + key + "\" has " + std::to_string(out.size()) +
                                             " entries, the scheduler's optimizer has " + std::to_string(n) + " groups");
    return out;
}

int64_t int_field(const PyObj &d, const char *key, const std::string &what)
{
    const PyObj *v = d.get(key);
    if (v == nullptr || v->kind != PyObj::Kind::Int)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is missing or not an integer");
    return v->i;
}

double float_field(const PyObj &d, const char *key, const std::string &what)
{
    const PyObj *v = d.get(key);
    if (v != nullptr && v->kind == PyObj::Kind::Float) return v->f;
    if (v != nullptr && v->kind == PyObj::Kind::Int) return static_cast<double>(v->i);
    fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is missing or not a number");
}

PyRef dataloader_state(const DataLoaderShard &dl)
{
    // Named after torchdata's StatefulDataLoader state where a key exists there (_num_yielded); read by accel.
    auto p = dl.position();
    auto d = py_dict();
    py_set(*d, "_num_yielded", py_int(p.batches_yielded));
    py_set(*d, "_iteration", py_int(p.epoch));
    py_set(*d, "_sampler_seed", py_int(static_cast<int64_t>(p.seed)));
    py_set(*d, "_accel_format", py_int(1));
    return d;
}

at::Tensor rng_state()
{
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
}

std::string checkpoint_name(int64_t iteration) { return "checkpoint_" + std::to_string(iteration); }

} // namespace

std::optional<int64_t> first_number(const std::string &name)
{
    size_t i = 0;
    while (i < name.size() && !std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
    if (i == name.size()) return std::nullopt;
    int64_t v = 0;
    for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
        if (v > (INT64_MAX - 9) / 10) return std::nullopt;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

std::vector<std::string> sorted_checkpoints(const std::string &base)
{
    std::vector<std::pair<int64_t, std::string>> found;
    if (!is_dir(base)) return {};
    for (const auto &name : list_dir(base)) {
        if (is_temp_name(name) || name.empty() || name[0] == '.') continue; // unfinished saves
        auto n = first_number(name);
        if (!n) continue;
        found.emplace_back(*n, name);
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const auto &a, const auto &b) { return a.first != b.first ? a.first < b.first : a.second < b.second; });
    std::vector<std::string> out;
    for (auto &f : found) out.push_back(std::move(f.second));
    return out;
}

TensorList model_state_dict(const Model &model, bool dedupe_shared)
{
    TensorList out;
    std::set<std::pair<const void *, size_t>> seen;
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()}) {
        for (const auto &[name, t] : *list) {
            if (!t.defined()) continue;
            if (dedupe_shared && t.numel() > 0) {
                auto key = std::make_pair(t.storage().data(), t.storage().nbytes());
                if (!seen.insert(key).second) continue; // tied weights are saved once, under the first name
            }
            out.emplace_back(name, t.detach());
        }
    }
    return out;
}

ShardPlan plan_shards(const TensorList &tensors, uint64_t max_shard_size)
{
    ShardPlan plan;
    std::map<std::pair<const void *, size_t>, size_t> storage_shard; // storage -> shard index
    std::vector<size_t> current;
    uint64_t current_size = 0;
    std::vector<std::pair<size_t, size_t>> late; // (tensor, shard) for shared storages
    std::vector<std::vector<size_t>> shards;
    std::vector<std::pair<std::pair<const void *, size_t>, size_t>> pending_current; // storages in the open shard
    for (size_t i = 0; i < tensors.size(); ++i) {
        const at::Tensor &t = tensors[i].second;
        auto key = std::make_pair(t.numel() > 0 ? t.storage().data() : static_cast<const void *>(nullptr),
                                  t.numel() > 0 ? t.storage().nbytes() : size_t(0));
        if (key.first != nullptr) {
            auto it = storage_shard.find(key);
            if (it != storage_shard.end()) {
                late.emplace_back(i, it->second);
                continue;
            }
        }
        const uint64_t size = t.nbytes();
        if (size > max_shard_size) {
            // A tensor bigger than the limit gets a shard of its own; the open shard stays open.
            shards.push_back({i});
            if (key.first != nullptr) storage_shard[key] = shards.size() - 1;
            plan.total_size += size;
            continue;
        }
        if (current_size + size > max_shard_size && !current.empty()) {
            shards.push_back(current);
            for (auto &[k, placeholder] : pending_current) storage_shard[k] = shards.size() - 1;
            pending_current.clear();
            current.clear();
            current_size = 0;
        }
        current.push_back(i);
        current_size += size;
        plan.total_size += size;
        if (key.first != nullptr) {
            pending_current.emplace_back(key, 0);
            storage_shard[key] = SIZE_MAX; // resolved when the shard closes
        }
    }
    if (!current.empty()) {
        shards.push_back(current);
        for (auto &[k, placeholder] : pending_current) storage_shard[k] = shards.size() - 1;
    }
    for (auto &[tensor, shard] : late) {
        size_t s = shard;
        if (s == SIZE_MAX) {
            const at::Tensor &t = tensors[tensor].second;
            s = storage_shard[{t.storage().data(), t.storage().nbytes()}];
        }
        shards.at(s).push_back(tensor);
    }
    plan.shards = std::move(shards);
    return plan;
}

std::string index_json(uint64_t total_size, const std::vector<std::pair<std::string, std::string>> &weight_map)
{
    auto sorted = weight_map;
    std::sort(sorted.begin(), sorted.end());
    std::string s = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total_size) + "\n  },\n  \"weight_map\": {";
    for (size_t i = 0; i < sorted.size(); ++i)
        s += std::string(i ? "," : "") + "\n    " + json_quote(sorted[i].first) + ": " + json_quote(sorted[i].second);
    s += sorted.empty() ? "}\n}\n" : "\n  }\n}\n";
    return s;
}

// ---- save_state ------------------------------------------------------------------------------------

namespace {

// Rotation (total_limit): the old folder is first renamed to a locked temp name, so that a save killed while
// removing it leaves a stale temp folder (removed by the next save) rather than a half-deleted checkpoint
// that still looks complete.
void retire_checkpoint_folder(const std::string &dir)
{
    const std::string tmp = temp_sibling(dir);
    TempFolderLock lock(tmp);
    if (exists(tmp)) remove_all(tmp);
    if (::rename(dir.c_str(), tmp.c_str()) != 0) {
        if (errno == ENOENT) return; // already gone (removed by hand, or by another node sharing the folder)
        fail_errno(errno, "cannot move aside (to remove it) the old checkpoint", dir);
    }
    remove_checkpoint_folder(tmp);
}

} // namespace

std::string save_state(Accelerator &acc, const char *output_dir, const config::SaveStateOptions &options)
{
    AcceleratorState &state = *acc.state();
    const auto &project = state.config.project;
    std::string target;
    std::vector<std::string> to_delete;
    if (project.automatic_checkpoint_naming) {
        // output_dir is ignored, as in Accelerate.
        const std::string base = join(normalize_path(*project.project_dir), "checkpoints");
        make_dirs(base);
        std::vector<std::string> entries = sorted_checkpoints(base);
        if (project.total_limit && static_cast<int64_t>(entries.size()) + 1 > *project.total_limit) {
            size_t n = entries.size() + 1 - static_cast<size_t>(*project.total_limit);
            for (size_t i = 0; i < n && i < entries.size(); ++i) to_delete.push_back(join(base, entries[i]));
        }
        target = join(base, checkpoint_name(acc.project_iteration()));
        if (exists(target))
            fail(ACCEL_ERR_ALREADY_EXISTS, "save_state: checkpoint folder \"" + target +
                                               "\" already exists; set project_config.iteration past it");
    } else {
        if (output_dir == nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "output_dir: must not be NULL unless "
                                             "project_config.automatic_checkpoint_naming is true");
        if (output_dir[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "output_dir: must not be empty");
        target = normalize_path(output_dir);
        if (exists(target) && !is_dir(target))
            fail(ACCEL_ERR_ALREADY_EXISTS, "output_dir: \"" + target + "\" exists and is not a folder");
        make_dirs(parent_of(target));
    }
    const std::string tmp = temp_sibling(target);
    const bool main = writes_main_files(state);
    // The main process prepares the temporary folder, every process writes its files into it, and the
    // main process publishes it once all are done (barriers between the phases; no-ops for one process).
    // The lock on the temp folder is held until the folder is published and rotation is done (temp_folder.hpp).
    std::optional<TempFolderLock> lock;
    if (main) {
        // Saves killed midway left their temp folders here (this name's included): remove those whose writer
        // is dead before adding another.
        remove_stale_temp_folders(parent_of(target));
        lock.emplace(tmp);
        if (exists(tmp)) remove_all(tmp); // ours by the lock: left by a save that never finished
        make_dirs(tmp);
    }
    acc.wait_for_everyone();
    try {
        auto path = [&](const std::string &name) { return join(tmp, name); };
        // Every file is one job: the state to write is gathered here, on the calling thread (optimizer
        // state, user callbacks), and the jobs then serialize and fsync their files concurrently.
        std::vector<std::function<void()>> jobs;
        auto torch_file = [&](const std::string &name, PyRef obj) {
            jobs.emplace_back([p = path(name), obj] { save_torch_file(p, *obj); });
        };
        // 1. model weights, 2. optimizers, 3. schedulers (main process).
        if (main) {
            for (size_t i = 0; i < acc.models().size(); ++i) {
                const Model &m = *acc.models()[i];
                if (options.safe_serialization) {
                    auto sd = std::make_shared<TensorList>(model_state_dict(m, true));
                    jobs.emplace_back([p = path(indexed(kSafeWeights, ".safetensors", i)), sd] {
                        StringMap meta{{"format", "pt"}};
                        save_safetensors(p, *sd, &meta);
                    });
                } else {
                    torch_file(indexed(kPickleWeights, ".bin", i), tensors_to_ordered_dict(model_state_dict(m, false)));
                }
            }
            for (size_t i = 0; i < acc.optimizers().size(); ++i)
                torch_file(indexed("optimizer", ".bin", i), optimizer_state_dict(*acc.optimizers()[i]));
            for (size_t i = 0; i < acc.schedulers().size(); ++i)
                torch_file(indexed("scheduler", ".bin", i), scheduler_state_dict(*acc.schedulers()[i]));
        }
        // 4. data-loader positions, 5. scaler, 6. RNG states (every process).
        for (size_t i = 0; i < acc.dataloaders().size(); ++i)
            torch_file(indexed("dl_state_dict", ".bin", i), dataloader_state(*acc.dataloaders()[i]));
        if (GradScaler *scaler = acc.scaler()) {
            auto d = py_dict();
            if (auto s = scaler->state_dict()) {
                py_set(*d, "scale", py_float(s->scale));
                py_set(*d, "growth_factor", py_float(s->growth_factor));
                py_set(*d, "backoff_factor", py_float(s->backoff_factor));
                py_set(*d, "growth_interval", py_int(s->growth_interval));
                py_set(*d, "_growth_tracker", py_int(s->growth_tracker));
            }
            torch_file("scaler.pt", d);
        }
        {
            auto d = py_dict();
            py_set(*d, "step", py_int(state.step));
            py_set(*d, "torch_manual_seed", py_tensor(rng_state()));
            torch_file("random_states_" + std::to_string(state.process_index()) + ".pkl", d);
        }
        // 7. registered custom objects (main process).
        if (main) {
            for (size_t i = 0; i < acc.custom_objects().size(); ++i)
                torch_file("custom_checkpoint_" + std::to_string(i) + ".pkl", py_bytes(acc.custom_objects()[i].save()));
        }
        run_jobs(jobs, io_threads());
        acc.wait_for_everyone();
        if (main) publish_dir(tmp, target);
    } catch (...) {
        try {
            if (main) remove_all(tmp);
        } catch (...) {
        }
        throw;
    }
    // Rotation only once the new checkpoint is complete.
    if (main) {
        for (const auto &old : to_delete) retire_checkpoint_folder(old);
        if (!to_delete.empty()) fsync_dir(parent_of(target));
        lock.reset();
    }
    acc.wait_for_everyone();
    acc.project_iteration() += 1;
    return target;
}

// ---- load_state ------------------------------------------------------------------------------------

std::string load_state(Accelerator &acc, const char *input_dir, const config::LoadStateOptions &options)
{
    AcceleratorState &state = *acc.state();
    const auto &project = state.config.project;
    std::string dir;
    if (input_dir != nullptr) {
        if (input_dir[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "input_dir: must not be empty");
        dir = normalize_path(input_dir);
        if (!is_dir(dir)) fail(ACCEL_ERR_NOT_FOUND, "input_dir: \"" + dir + "\" is not a folder");
    } else {
        if (!project.automatic_checkpoint_naming)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "input_dir: must not be NULL unless "
                                             "project_config.automatic_checkpoint_naming is true");
        const std::string base = join(normalize_path(*project.project_dir), "checkpoints");
        // Saves killed midway left temp folders here; the main process removes those whose writer is dead.
        if (writes_main_files(state)) remove_stale_temp_folders(base);
        auto names = sorted_checkpoints(base);
        if (names.empty()) fail(ACCEL_ERR_NOT_FOUND, "load_state: no checkpoint in \"" + base + "\"");
        dir = join(base, names.back());
    }
    auto file = [&](const std::string &name) { return join(dir, name); };

    // Phase 1: read and validate every file, so that a damaged checkpoint changes nothing.
    std::vector<TensorList> weights;
    for (size_t i = 0; i < acc.models().size(); ++i) {
        const std::string st = file(indexed(kSafeWeights, ".safetensors", i));
        const std::string bin = file(indexed(kPickleWeights, ".bin", i));
        if (exists(st)) weights.push_back(load_safetensors(st).tensors);
        else if (exists(bin)) weights.push_back(tensors_from_pickle(*load_torch_file(bin), bin));
        else fail(ACCEL_ERR_NOT_FOUND, "load_state: \"" + dir + "\" has neither " + basename_of(st) + " nor " +
                                           basename_of(bin));
    }
    std::vector<PyRef> optimizers;
    for (size_t i = 0; i < acc.optimizers().size(); ++i)
        optimizers.push_back(load_torch_file(file(indexed("optimizer", ".bin", i))));
    struct SchedulerState {
        std::vector<double> base_lrs, last_lrs;
        int64_t last_epoch = 0;
    };
    std::vector<SchedulerState> schedulers;
    for (size_t i = 0; i < acc.schedulers().size(); ++i) {
        const std::string what = file(indexed("scheduler", ".bin", i));
        PyRef d = load_torch_file(what);
        if (!d->is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
        const size_t groups = acc.schedulers()[i]->base_lrs().size();
        schedulers.push_back({float_list(d->get("base_lrs"), what, "base_lrs", groups),
                              float_list(d->get("_last_lr"), what, "_last_lr", groups), int_field(*d, "last_epoch", what)});
    }
    std::vector<std::optional<DataLoaderShard::Position>> positions;
    for (size_t i = 0; i < acc.dataloaders().size(); ++i) {
        const std::string p = file(indexed("dl_state_dict", ".bin", i));
        if (!exists(p)) {
            positions.emplace_back();
            continue;
        }
        PyRef d = load_torch_file(p);
        DataLoaderShard::Position pos;
        pos.batches_yielded = int_field(*d, "_num_yielded", p);
        pos.epoch = int_field(*d, "_iteration", p);
        pos.seed = static_cast<uint64_t>(int_field(*d, "_sampler_seed", p));
        if (pos.batches_yielded < 0 || pos.epoch < 0) fail(ACCEL_ERR_DATA_LOSS, p + ": negative position");
        positions.emplace_back(pos);
    }
    std::optional<GradScalerState> scaler_state;
    bool has_scaler_file = false;
    if (GradScaler *scaler = acc.scaler(); scaler != nullptr && exists(file("scaler.pt"))) {
        has_scaler_file = true;
        PyRef d = load_torch_file(file("scaler.pt"));
        if (!d->is_dict()) fail(ACCEL_ERR_DATA_LOSS, file("scaler.pt") + ": not a dict");
        if (!d->map.empty()) {
            GradScalerState s;
            s.scale = float_field(*d, "scale", file("scaler.pt"));
            s.growth_factor = float_field(*d, "growth_factor", file("scaler.pt"));
            s.backoff_factor = float_field(*d, "backoff_factor", file("scaler.pt"));
            s.growth_interval = int_field(*d, "growth_interval", file("scaler.pt"));
            s.growth_tracker = int_field(*d, "_growth_tracker", file("scaler.pt"));
            scaler_state = s;
        }
        if (!scaler_state && scaler->is_enabled())
            fail(ACCEL_ERR_DATA_LOSS, file("scaler.pt") + ": empty scaler state for an enabled gradient scaler");
    }
    std::optional<int64_t> step;
    at::Tensor rng;
    {
        const std::string p = file("random_states_" + std::to_string(state.process_index()) + ".pkl");
        if (exists(p)) {
            PyRef d = load_torch_file(p);
            if (!d->is_dict()) fail(ACCEL_ERR_DATA_LOSS, p + ": not a dict");
            step = int_field(*d, "step", p);
            const PyObj *seed = d->get("torch_manual_seed");
            if (seed != nullptr) {
                if (seed->kind != PyObj::Kind::Tensor || seed->tensor.scalar_type() != at::kByte)
                    fail(ACCEL_ERR_DATA_LOSS, p + ": \"torch_manual_seed\" is not a uint8 tensor");
                rng = seed->tensor.contiguous();
                try { // on a generator of its own, so that a bad state changes nothing
                    at::make_generator<at::CPUGeneratorImpl>().set_state(rng);
                } catch (const c10::Error &) {
                    fail(ACCEL_ERR_DATA_LOSS, p + ": \"torch_manual_seed\" is not a CPU generator state of this LibTorch");
                }
            }
        }
    }
    std::vector<std::string> custom;
    {
        size_t count = 0;
        for (const auto &name : list_dir(dir)) {
            const std::string prefix = "custom_checkpoint_";
            if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() + 4 &&
                name.compare(name.size() - 4, 4, ".pkl") == 0) {
                std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - 4);
                if (!mid.empty() && mid.find_first_not_of("0123456789") == std::string::npos) ++count;
            }
        }
        if (count != acc.custom_objects().size())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "load_state: \"" + dir + "\" holds " + std::to_string(count) +
                                                    " custom checkpoint files but " +
                                                    std::to_string(acc.custom_objects().size()) +
                                                    " objects are registered for checkpointing");
        for (size_t i = 0; i < count; ++i) {
            const std::string p = file("custom_checkpoint_" + std::to_string(i) + ".pkl");
            PyRef v = load_torch_file(p);
            if (v->kind != PyObj::Kind::Bytes) fail(ACCEL_ERR_DATA_LOSS, p + ": not a bytes object");
            custom.push_back(v->s);
        }
    }

    // Phase 2: apply, in Accelerate's order. The weights and optimizer state (nearly all the bytes) are
    // checked and put in place first, then copied in together: straight from the files into the tensors,
    // on several threads (CopyBatch).
    // The models' and optimizers' checks (names, shapes, hyperparameters) run while their copies are
    // scheduled; nothing changes until every one has passed.
    CopyBatch batch;
    auto schedule = [&batch](const at::Tensor &dst, const at::Tensor &src) { batch.add(dst, src); };
    for (size_t i = 0; i < weights.size(); ++i) acc.models()[i]->load_state_dict(weights[i], options.strict, schedule);
    std::vector<std::function<void()>> install_optimizer_state;
    for (size_t i = 0; i < optimizers.size(); ++i)
        install_optimizer_state.push_back(load_optimizer_state_dict(*acc.optimizers()[i], *optimizers[i],
                                                                    file(indexed("optimizer", ".bin", i)), batch));
    batch.run();
    for (auto &install : install_optimizer_state) install();
    for (size_t i = 0; i < schedulers.size(); ++i) {
        auto &s = schedulers[i];
        acc.schedulers()[i]->restore(std::move(s.base_lrs), s.last_epoch, std::move(s.last_lrs));
    }
    for (size_t i = 0; i < positions.size(); ++i)
        if (positions[i]) acc.dataloaders()[i]->restore_position(*positions[i]);
    if (has_scaler_file) acc.scaler()->load_state_dict(scaler_state);
    if (step) state.step = *step;
    if (rng.defined()) {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(rng); // checked in phase 1
    }
    for (size_t i = 0; i < custom.size(); ++i) acc.custom_objects()[i].load(custom[i]);
    // The next automatic checkpoint follows the one loaded.
    if (project.automatic_checkpoint_naming && input_dir == nullptr) {
        if (auto n = first_number(basename_of(dir))) acc.project_iteration() = std::max(acc.project_iteration(), *n + 1);
    }
    return dir;
}

// ---- save_model / load_checkpoint_in_model ---------------------------------------------------------

namespace {
bool stale_shard(const std::string &name)
{
    // <anything>-NNNNN-of-NNNNN once ".bin" is removed (huggingface's cleanup rule).
    std::string n = name;
    auto pos = n.find(".bin");
    if (pos != std::string::npos) n.erase(pos, 4);
    if (n.size() < 15) return false;
    std::string tail = n.substr(n.size() - 15);
    auto digits = [&](size_t a) {
        for (size_t k = a; k < a + 5; ++k)
            if (!std::isdigit(static_cast<unsigned char>(tail[k]))) return false;
        return true;
    };
    return tail[0] == '-' && digits(1) && tail.compare(6, 4, "-of-") == 0 && digits(10);
}

void write_weights_file(const std::string &path, const TensorList &tensors, bool safe)
{
    const std::string tmp = join(parent_of(path), "." + basename_of(path) + ".accel-tmp");
    if (safe) {
        StringMap meta{{"format", "pt"}};
        save_safetensors(tmp, tensors, &meta);
    } else {
        save_torch_file(tmp, *tensors_to_ordered_dict(tensors));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail_errno(errno, "cannot rename to", path);
}

char hex5_buf[32];
std::string five(size_t v)
{
    std::snprintf(hex5_buf, sizeof hex5_buf, "%05zu", v);
    return hex5_buf;
}
} // namespace

void save_model(Accelerator &acc, const Model &model, const std::string &save_directory,
                const config::SaveModelOptions &options)
{
    const std::string dir = normalize_path(save_directory);
    if (exists(dir) && !is_dir(dir))
        fail(ACCEL_ERR_ALREADY_EXISTS, "save_directory: \"" + dir + "\" is a file, not a folder");
    if (!writes_main_files(*acc.state())) return;
    make_dirs(dir);
    const bool safe = options.safe_serialization;
    TensorList sd = model_state_dict(model, safe);
    ShardPlan plan = plan_shards(sd, options.max_shard_size);
    const std::string stem = safe ? "model" : "pytorch_model";
    const std::string ext = safe ? ".safetensors" : ".bin";
    const size_t k = plan.shards.size();
    std::vector<std::string> names;
    for (size_t i = 0; i < k; ++i)
        names.push_back(k <= 1 ? stem + ext : stem + "-" + five(i + 1) + "-of-" + five(k) + ext);
    // Stale shards of an earlier save (the reference's rule, which in effect only matches .bin shards).
    const std::string base_no_bin = safe ? "model.safetensors" : "pytorch_model";
    for (const auto &name : list_dir(dir)) {
        if (name.rfind(base_no_bin, 0) == 0 && is_regular_file(join(dir, name)) &&
            std::find(names.begin(), names.end(), name) == names.end() && stale_shard(name))
            remove_all(join(dir, name));
    }
    std::vector<std::pair<std::string, std::string>> weight_map;
    if (k == 0) {
        write_weights_file(join(dir, names.empty() ? stem + ext : names[0]), {}, safe);
    }
    for (size_t i = 0; i < k; ++i) {
        TensorList shard;
        for (size_t idx : plan.shards[i]) {
            shard.push_back(sd[idx]);
            weight_map.emplace_back(sd[idx].first, names[i]);
        }
        write_weights_file(join(dir, names[i]), shard, safe);
    }
    const std::string index_name = safe ? "model.safetensors.index.json" : "pytorch_model.bin.index.json";
    if (k > 1) {
        std::string text = index_json(plan.total_size, weight_map);
        const std::string tmp = join(dir, "." + index_name + ".accel-tmp");
        write_file_durably(tmp, text.data(), text.size());
        if (std::rename(tmp.c_str(), join(dir, index_name).c_str()) != 0)
            fail_errno(errno, "cannot rename to", join(dir, index_name));
    }
    fsync_dir(dir);
}

void load_checkpoint_in_model(Model &model, const std::string &path_in, const config::LoadCheckpointOptions &options)
{
    const std::string path = normalize_path(path_in);
    std::vector<std::string> files;
    if (is_dir(path)) {
        std::string idx = join(path, "model.safetensors.index.json");
        if (!exists(idx)) idx = join(path, "pytorch_model.bin.index.json");
        if (exists(idx)) {
            for (const auto &f : index_shard_files(idx)) files.push_back(join(path, f));
        } else if (exists(join(path, "model.safetensors"))) {
            files.push_back(join(path, "model.safetensors"));
        } else if (exists(join(path, "pytorch_model.bin"))) {
            files.push_back(join(path, "pytorch_model.bin"));
        } else {
            fail(ACCEL_ERR_NOT_FOUND, "path: \"" + path + "\" holds no index, model.safetensors or pytorch_model.bin");
        }
    } else if (exists(path)) {
        files.push_back(path);
    } else {
        fail(ACCEL_ERR_NOT_FOUND, "path: \"" + path + "\" does not exist");
    }
    TensorList all;
    for (const auto &f : files) {
        const bool st = f.size() >= 12 && f.compare(f.size() - 12, 12, ".safetensors") == 0;
        TensorList part = st ? load_safetensors(f).tensors : tensors_from_pickle(*load_torch_file(f), f);
        for (auto &e : part) all.push_back(std::move(e));
    }
    if (options.dtype) {
        at::ScalarType to = *options.dtype == ACCEL_DTYPE_FLOAT64   ? at::kDouble
                            : *options.dtype == ACCEL_DTYPE_FLOAT16 ? at::kHalf
                            : *options.dtype == ACCEL_DTYPE_BFLOAT16 ? at::kBFloat16
                                                                      : at::kFloat;
        for (auto &e : all)
            if (at::isFloatingType(e.second.scalar_type())) e.second = e.second.to(to);
    }
    CopyBatch batch;
    model.load_state_dict(all, options.strict, [&batch](const at::Tensor &dst, const at::Tensor &src) { batch.add(dst, src); });
    batch.run();
}

} // namespace accel::ckpt
