#include "checkpointing/checkpointing.hpp"

#include "checkpointing/deepspeed_folder.hpp"
#include "checkpointing/integrity.hpp"
#include "checkpointing/merge_weights.hpp"
#include "checkpointing/sharded_folder.hpp"
#include "checkpointing/temp_folder.hpp"
#include "checkpointing/torch_archive.hpp"
#include "checkpointing/weight_shards.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/job_pool.hpp"
#include "common/json_reader.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace accel::ckpt {

namespace {

const char *kSafeWeights = "model";
const char *kPickleWeights = "pytorch_model";

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

std::string checkpoint_name(int64_t iteration) { return "checkpoint_" + std::to_string(iteration); }

} // namespace

std::string indexed(const std::string &stem, const std::string &ext, size_t i)
{
    return i == 0 ? stem + ext : stem + "_" + std::to_string(i) + ext;
}

std::string weights_name(size_t i, bool safetensors)
{
    return safetensors ? indexed(kSafeWeights, ".safetensors", i) : indexed(kPickleWeights, ".bin", i);
}

std::string random_states_name(int64_t process_index) { return "random_states_" + std::to_string(process_index) + ".pkl"; }

std::string custom_checkpoint_name(size_t i) { return "custom_checkpoint_" + std::to_string(i) + ".pkl"; }

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
        // Tied tensors are the same memory, not merely the same storage: a sharded model's parameters are
        // all views of one flat buffer and still go to shards of their own.
        auto key = std::make_pair(t.numel() > 0 ? t.data_ptr() : static_cast<const void *>(nullptr),
                                  t.numel() > 0 ? t.nbytes() : size_t(0));
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

// ---- folders ---------------------------------------------------------------------------------------

namespace {

// The names a save_state writes (any number of models, optimizers, ... and processes): in a folder that
// save_state(output_dir) replaces, these are the previous checkpoint's and go; every other entry is the
// user's and stays. Folders: SHARDED_STATE_DICT's pytorch_model_fsdp_{i} / optimizer_{i}, and DeepSpeed's tag
// folders pytorch_model[_{i}] where they hold only DeepSpeed's files (a user's folder of that name is kept,
// and a save that would write it is refused: publish_dir).
bool is_checkpoint_entry(const std::string &dir, const std::string &name, bool folder)
{
    auto numbered = [&](const std::string &stem, const std::string &ext, bool bare_allowed) {
        if (name.size() < stem.size() + ext.size() || name.compare(0, stem.size(), stem) != 0 ||
            name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
            return false;
        std::string mid = name.substr(stem.size(), name.size() - stem.size() - ext.size());
        if (mid.empty()) return bare_allowed;
        return mid.size() > 1 && mid[0] == '_' && mid.find_first_not_of("0123456789", 1) == std::string::npos;
    };
    if (folder)
        return numbered("pytorch_model_fsdp", "", false) || numbered("optimizer", "", false) ||
               (numbered(kPickleWeights, "", true) && holds_only_deepspeed_files(join(dir, name)));
    return numbered(kSafeWeights, ".safetensors", true) || numbered(kPickleWeights, ".bin", true) ||
           numbered("optimizer", ".bin", true) || numbered("scheduler", ".bin", true) ||
           numbered("sampler", ".bin", true) || numbered("dl_state_dict", ".bin", true) || name == "scaler.pt" ||
           numbered("random_states", ".pkl", false) || numbered("custom_checkpoint", ".pkl", false) ||
           name == "latest" || name == "zero_to_fp32.py" || name == kChecksumManifest;
}

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

std::vector<std::string> prepared_part_entries(const std::string &dir)
{
    std::vector<std::string> out;
    for (const auto &name : list_dir(dir)) {
        const bool folder = is_dir(join(dir, name));
        if (!is_checkpoint_entry(dir, name, folder)) continue;
        // What every process writes for itself (RNG), registered objects (counted on their own) and DeepSpeed's
        // side files are not a prepared object's state.
        if (name.rfind("random_states", 0) == 0 || name.rfind("custom_checkpoint", 0) == 0 || name == "latest" ||
            name == "zero_to_fp32.py" || name == "scaler.pt" || name == kChecksumManifest)
            continue;
        out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
}

SaveTarget save_target(const config::ProjectConfiguration &project, const char *output_dir, int64_t iteration)
{
    SaveTarget t;
    if (project.automatic_checkpoint_naming) {
        // output_dir is ignored, as in Accelerate.
        const std::string base = join(normalize_path(*project.project_dir), "checkpoints");
        make_dirs(base);
        std::vector<std::string> entries = sorted_checkpoints(base);
        if (project.total_limit && static_cast<int64_t>(entries.size()) + 1 > *project.total_limit) {
            size_t n = entries.size() + 1 - static_cast<size_t>(*project.total_limit);
            for (size_t i = 0; i < n && i < entries.size(); ++i) t.rotate_out.push_back(join(base, entries[i]));
        }
        t.dir = join(base, checkpoint_name(iteration));
        if (exists(t.dir))
            fail(ACCEL_ERR_ALREADY_EXISTS, "save_state: checkpoint folder \"" + t.dir +
                                               "\" already exists; set project_config.iteration past it");
    } else {
        if (output_dir == nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "output_dir: must not be NULL unless "
                                             "project_config.automatic_checkpoint_naming is true");
        if (output_dir[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "output_dir: must not be empty");
        t.dir = normalize_path(output_dir);
        if (exists(t.dir) && !is_dir(t.dir))
            fail(ACCEL_ERR_ALREADY_EXISTS, "output_dir: \"" + t.dir + "\" exists and is not a folder");
        make_dirs(parent_of(t.dir));
    }
    return t;
}

std::vector<std::string> load_sources(const config::ProjectConfiguration &project, const char *input_dir)
{
    if (input_dir != nullptr) {
        if (input_dir[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "input_dir: must not be empty");
        std::string dir = normalize_path(input_dir);
        if (!is_dir(dir)) fail(ACCEL_ERR_NOT_FOUND, "input_dir: \"" + dir + "\" is not a folder");
        return {dir};
    }
    if (!project.automatic_checkpoint_naming)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input_dir: must not be NULL unless "
                                         "project_config.automatic_checkpoint_naming is true");
    const std::string base = join(normalize_path(*project.project_dir), "checkpoints");
    // Saves killed midway left temp folders here: remove those whose writer is dead (every process may; the
    // writers' locks decide, see temp_folder.hpp).
    remove_stale_temp_folders(base);
    auto names = sorted_checkpoints(base);
    if (names.empty()) fail(ACCEL_ERR_NOT_FOUND, "load_state: no checkpoint in \"" + base + "\"");
    std::vector<std::string> out;
    for (auto it = names.rbegin(); it != names.rend(); ++it) out.push_back(join(base, *it));
    return out;
}

PreparedCheckpoint prepare_checkpoint(const SaveTarget &target, bool main)
{
    PreparedCheckpoint p;
    p.target = target;
    p.tmp = temp_sibling(target.dir);
    p.main = main;
    if (main) {
        // Saves killed midway left their temp folders here (this name's included): remove those whose writer
        // is dead before adding another. The lock is held until the folder is published or removed.
        remove_stale_temp_folders(parent_of(target.dir));
        p.lock = std::make_shared<TempFolderLock>(p.tmp);
        if (exists(p.tmp)) remove_all(p.tmp); // ours by the lock: left by a save that never finished
        make_dirs(p.tmp);
    }
    return p;
}

void write_checkpoint_files(const PreparedCheckpoint &p, const std::vector<CheckpointFile> &files, size_t threads)
{
    // Every file is one job: the jobs serialize and fsync their files concurrently.
    std::vector<std::function<void()>> jobs;
    for (const auto &f : files) {
        const std::string path = join(p.tmp, f.name);
        if (f.name.find('/') != std::string::npos) make_dirs(parent_of(path)); // every writer of a sub-folder
        if (f.bytes) {
            jobs.emplace_back([path, b = f.bytes] { write_file_durably(path, b->data(), b->size()); });
        } else if (f.tensors) {
            jobs.emplace_back([path, t = f.tensors] {
                StringMap meta{{"format", "pt"}};
                save_safetensors(path, *t, &meta);
            });
        } else {
            jobs.emplace_back([path, obj = f.object] { save_torch_file(path, *obj); });
        }
    }
    run_jobs(jobs, threads);
    std::vector<std::string> names;
    for (const auto &f : files) names.push_back(f.name);
    note_written_files(p.tmp, names); // the main process records them when it publishes
    std::set<std::string> subfolders; // their entries must be durable too
    for (const auto &f : files)
        if (f.name.find('/') != std::string::npos) subfolders.insert(parent_of(join(p.tmp, f.name)));
    for (const auto &d : subfolders) fsync_dir(d);
}

void publish_checkpoint(PreparedCheckpoint &p)
{
    if (!p.main) return;
    const std::string &dir = p.target.dir;
    seal_checkpoint_folder(p.tmp);
    publish_dir(p.tmp, dir, [&dir](const std::string &name, bool folder) { return is_checkpoint_entry(dir, name, folder); });
    // Rotation only once the new checkpoint is complete.
    for (const auto &old : p.target.rotate_out) retire_checkpoint_folder(old);
    if (!p.target.rotate_out.empty()) fsync_dir(parent_of(p.target.dir));
    p.lock.reset();
}

void abandon_checkpoint(PreparedCheckpoint &p) noexcept
{
    if (!p.main) return;
    try {
        remove_all(p.tmp);
    } catch (...) {
    }
    p.lock.reset();
}

void write_checkpoint(const SaveTarget &target, const std::vector<CheckpointFile> &files, bool main,
                      const std::function<void()> &barrier, const std::function<void(const std::string &)> &before_write)
{
    // The main process prepares the temporary folder, every process writes its files into it, and the
    // main process publishes it once all are done (barriers between the phases; no-ops for one process).
    PreparedCheckpoint p = prepare_checkpoint(target, main);
    try {
        barrier();
        if (before_write) before_write(p.tmp);
        write_checkpoint_files(p, files, io_threads());
        barrier();
        publish_checkpoint(p);
    } catch (...) {
        abandon_checkpoint(p);
        throw;
    }
    barrier();
}

namespace {

// A tensor of `state` as metadata.json lists it: its pieces' ranks as files are named (under tp, of the tp ranks
// that write it), a split tensor's shape the whole one's.
ShardedTensorMeta sharded_tensor_meta(const ShardedTensor &t, const TpSave *tp)
{
    ShardedTensorMeta m;
    m.name = t.name;
    auto dtype = st_dtype_of(t.dtype);
    if (!dtype) fail(ACCEL_ERR_UNIMPLEMENTED, "save_state: tensor \"" + t.name + "\" has a dtype safetensors cannot hold");
    m.dtype = *dtype;
    for (int64_t d : t.shape) m.shape.push_back(static_cast<uint64_t>(d));
    const int32_t size = tp ? tp->size : 1;
    const auto *split = tp && tp->split.count(t.name) > 0 ? &tp->split.at(t.name) : nullptr;
    if (split == nullptr) {
        for (const auto &p : t.pieces)
            m.pieces.push_back({p.rank * size, static_cast<uint64_t>(p.offset), static_cast<uint64_t>(p.numel)});
        return m;
    }
    m.tp = split->first;
    const std::vector<uint64_t> slice = m.shape;
    m.shape[static_cast<size_t>(m.tp.dim)] = split->second;
    if (!tp_split_problem(m.shape, m.tp).empty() || tp_slice_shape(m.shape, m.tp) != slice)
        fail(ACCEL_ERR_INTERNAL, "save_state: tensor \"" + t.name + "\" is not a tp slice of its whole shape");
    // The engine's layout is the same on every tp rank (the slices are of one size): each tp rank's pieces.
    for (int32_t r = 0; r < size; ++r)
        for (const auto &p : t.pieces)
            m.pieces.push_back({p.rank * size + r, static_cast<uint64_t>(p.offset), static_cast<uint64_t>(p.numel), r});
    return m;
}

} // namespace

void add_sharded_files(std::vector<CheckpointFile> &files, const std::string &folder, const ShardedState &state,
                       int64_t process_index, bool main, const TpSave *tp)
{
    const int32_t tp_rank = tp ? tp->rank : 0, tp_size = tp ? tp->size : 1;
    const int32_t writer = state.rank * tp_size + tp_rank;
    if (process_index < static_cast<int64_t>(state.world_size) * tp_size) {
        if (tp != nullptr && process_index != writer)
            fail(ACCEL_ERR_INTERNAL, "save_state: process " + std::to_string(process_index) + " would write the pieces of rank " +
                                         std::to_string(writer) + " of a sharded state dict");
        auto mine = std::make_shared<TensorList>();
        for (const auto &t : state.tensors)
            if (t.local.defined() && (tp_rank == 0 || tp->split.count(t.name) > 0)) mine->emplace_back(t.name, t.local);
        files.push_back({folder + "/" + sharded_rank_file(writer), nullptr, mine, nullptr});
    }
    if (!main) return;
    ShardedMeta meta;
    meta.world_size = state.world_size * tp_size;
    for (const auto &t : state.tensors) meta.tensors.push_back(sharded_tensor_meta(t, tp));
    files.push_back({folder + "/" + kShardedMetadata, nullptr, nullptr,
                     std::make_shared<const std::string>(sharded_metadata_json(meta))});
    if (state.rest) files.push_back({folder + "/state.bin", state.rest, nullptr, nullptr});
}

PyRef read_sharded_rest(const std::string &dir)
{
    // The folder is a sharded state dict (its metadata.json is there): a state.bin gone is damage, not absence.
    if (!exists(join(dir, "state.bin")))
        fail(ACCEL_ERR_DATA_LOSS, "\"" + join(dir, "state.bin") + "\" is missing: a sharded optimizer folder holds it "
                                  "(the optimizer's state besides its tensors)");
    return read_object(dir, "state.bin", true);
}

ShardedSource sharded_source(const std::string &dir)
{
    auto folder = std::make_shared<const ShardedFolder>(dir);
    auto index = [folder, dir](const std::string &name) {
        const int64_t i = folder->find(name);
        if (i < 0) fail(ACCEL_ERR_INVALID_ARGUMENT, dir + ": has no tensor \"" + name + "\"");
        return static_cast<size_t>(i);
    };
    auto dtype_of = [folder, dir](size_t i) {
        const auto &m = folder->meta().tensors[i];
        auto dtype = scalar_type_of(m.dtype);
        if (!dtype) fail(ACCEL_ERR_UNIMPLEMENTED, dir + ": tensor \"" + m.name + "\" is " + st_dtype_name(m.dtype) +
                                                      ", which LibTorch 1.13 has no dtype for");
        return *dtype;
    };
    ShardedSource src;
    src.names = [folder] {
        std::vector<std::string> out;
        for (const auto &t : folder->meta().tensors) out.push_back(t.name);
        return out;
    };
    src.find = [folder](const std::string &name, std::vector<int64_t> &shape) {
        const int64_t i = folder->find(name);
        if (i < 0) return false;
        const auto &s = folder->meta().tensors[static_cast<size_t>(i)].shape;
        shape.assign(s.begin(), s.end());
        return true;
    };
    src.dtype = [index, dtype_of](const std::string &name) { return dtype_of(index(name)); };
    src.read = [folder, index, dtype_of](const std::string &name, int64_t offset, const at::Tensor &dst) {
        const size_t i = index(name);
        const at::ScalarType dtype = dtype_of(i);
        const auto n = static_cast<uint64_t>(dst.numel());
        if (dst.is_cpu() && dst.is_contiguous() && dst.scalar_type() == dtype) {
            folder->read_range(i, static_cast<uint64_t>(offset), n, dst.data_ptr());
        } else { // through a temporary of the file's dtype
            at::Tensor tmp = at::empty({dst.numel()}, at::TensorOptions().dtype(dtype));
            folder->read_range(i, static_cast<uint64_t>(offset), n, tmp.data_ptr());
            dst.copy_(tmp.view(dst.sizes()));
        }
    };
    return src;
}

ShardedSource tensor_source(const TensorList &tensors)
{
    auto all = std::make_shared<const TensorList>(tensors);
    auto index = std::make_shared<std::map<std::string, size_t>>();
    for (size_t i = 0; i < all->size(); ++i) index->emplace((*all)[i].first, i); // the first of a repeated name
    auto tensor = [all, index](const std::string &name) -> const at::Tensor * {
        auto it = index->find(name);
        return it == index->end() ? nullptr : &(*all)[it->second].second;
    };
    ShardedSource src;
    src.names = [all] {
        std::vector<std::string> out;
        for (const auto &e : *all) out.push_back(e.first);
        return out;
    };
    src.find = [tensor](const std::string &name, std::vector<int64_t> &shape) {
        const at::Tensor *t = tensor(name);
        if (t != nullptr) shape = t->sizes().vec();
        return t != nullptr;
    };
    src.dtype = [tensor](const std::string &name) {
        const at::Tensor *t = tensor(name);
        if (t == nullptr) fail(ACCEL_ERR_INTERNAL, "tensor source: no tensor \"" + name + "\"");
        return t->scalar_type();
    };
    src.read = [tensor](const std::string &name, int64_t offset, const at::Tensor &dst) {
        const at::Tensor *t = tensor(name);
        if (t == nullptr || offset < 0 || offset + dst.numel() > t->numel())
            fail(ACCEL_ERR_INTERNAL, "tensor source: elements of \"" + name + "\" out of range");
        dst.copy_(t->reshape({-1}).narrow(0, offset, dst.numel()).view(dst.sizes()));
    };
    return src;
}

TensorList read_sharded_tensors(const std::string &dir) { return read_source_tensors(sharded_source(dir)); }

TensorList read_source_tensors(const ShardedSource &src)
{
    TensorList out;
    for (const auto &name : src.names()) {
        std::vector<int64_t> shape;
        src.find(name, shape);
        at::Tensor t = at::empty(shape, at::TensorOptions().dtype(src.dtype(name)));
        src.read(name, 0, t.view({-1}));
        out.emplace_back(name, std::move(t));
    }
    return out;
}

TensorList read_weights(const std::string &dir, size_t i)
{
    const std::string st = join(dir, weights_name(i, true));
    const std::string bin = join(dir, weights_name(i, false));
    if (exists(st)) return load_safetensors(st).tensors;
    if (exists(bin)) return tensors_from_pickle(*load_torch_file(bin), bin);
    fail(ACCEL_ERR_NOT_FOUND, "load_state: \"" + dir + "\" has neither " + basename_of(st) + " nor " + basename_of(bin));
}

PyRef read_object(const std::string &dir, const std::string &name, bool required)
{
    const std::string p = join(dir, name);
    if (!exists(p)) {
        if (required) fail(ACCEL_ERR_NOT_FOUND, "load_state: \"" + p + "\" does not exist");
        return nullptr;
    }
    return load_torch_file(p);
}

size_t count_custom_checkpoints(const std::string &dir)
{
    size_t count = 0;
    const std::string prefix = "custom_checkpoint_";
    for (const auto &name : list_dir(dir)) {
        if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() + 4 &&
            name.compare(name.size() - 4, 4, ".pkl") == 0) {
            std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - 4);
            if (!mid.empty() && mid.find_first_not_of("0123456789") == std::string::npos) ++count;
        }
    }
    return count;
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

std::string five(size_t v)
{
    char buf[32]; // on the stack: a pipeline's stages name their shards at once (thread ranks in one process too)
    std::snprintf(buf, sizeof buf, "%05zu", v);
    return buf;
}
} // namespace

size_t merge_weights(const std::string &input, const std::string &output, bool safe)
{
    // DeepSpeed's layout (a tag folder, or a save_state folder holding pytorch_model/): the float32
    // parameters joined from every rank's partition (what DeepSpeed's zero_to_fp32.py does), the buffers.
    const std::string ds = is_deepspeed_folder(input) ? input : deepspeed_load_folder(input, 0);
    if (is_deepspeed_folder(ds)) {
        const TensorList tensors = read_deepspeed_whole(ds).model; // tp slices joined
        write_weights_file(output, tensors, safe);
        fsync_dir(parent_of(output));
        return tensors.size();
    }
    if (safe) return merge_safetensors_shards(input, output);
    const MergeSource source(input);
    TensorList tensors;
    for (const auto &t : source.tensors()) {
        const auto type = scalar_type_of(t.dtype);
        if (!type)
            fail(ACCEL_ERR_UNIMPLEMENTED, "merge-weights: tensor \"" + t.name + "\" is " + st_dtype_name(t.dtype) +
                                              ", which this LibTorch cannot hold in a pickle; merge it into "
                                              "safetensors instead");
        const std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
        const auto options = at::TensorOptions().dtype(*type);
        // The readers checked each tensor's bytes against its shape; checked again before any copy.
        unsigned __int128 need = c10::elementSize(*type);
        for (uint64_t d : t.shape) need *= d;
        if (need != t.nbytes())
            fail(ACCEL_ERR_DATA_LOSS, "merge-weights: tensor \"" + t.name + "\" has " + std::to_string(t.nbytes()) +
                                          " bytes, which do not match its shape");
        at::Tensor x;
        if (t.spans.size() == 1) { // one piece: written straight from the input's mapping
            x = at::from_blob(const_cast<uint8_t *>(t.spans[0].first), shape, options);
        } else {
            x = at::empty(shape, options);
            auto *dst = static_cast<uint8_t *>(x.data_ptr());
            for (const auto &[data, len] : t.spans) dst = static_cast<uint8_t *>(std::memcpy(dst, data, len)) + len;
        }
        tensors.emplace_back(t.name, x);
    }
    write_weights_file(output, tensors, false);
    fsync_dir(parent_of(output));
    return tensors.size();
}

std::string weights_shard_name(bool safe, size_t index, size_t total)
{
    const std::string stem = safe ? "model" : "pytorch_model";
    const std::string ext = safe ? ".safetensors" : ".bin";
    return total <= 1 ? stem + ext : stem + "-" + five(index + 1) + "-of-" + five(total) + ext;
}

void remove_stale_shards(const std::string &dir, bool safe, size_t total)
{
    std::vector<std::string> names;
    for (size_t i = 0; i < std::max<size_t>(total, 1); ++i) names.push_back(weights_shard_name(safe, i, total));
    // Stale shards of an earlier save (the reference's rule, which in effect only matches .bin shards).
    const std::string base_no_bin = safe ? "model.safetensors" : "pytorch_model";
    for (const auto &name : list_dir(dir)) {
        if (name.rfind(base_no_bin, 0) == 0 && is_regular_file(join(dir, name)) &&
            std::find(names.begin(), names.end(), name) == names.end() && stale_shard(name))
            remove_all(join(dir, name));
    }
}

std::vector<std::string> write_weight_shards(const std::string &dir, const TensorList &sd, const ShardPlan &plan, bool safe,
                                             size_t first, size_t total, std::vector<std::pair<std::string, std::string>> &weight_map)
{
    std::vector<std::string> written;
    for (size_t i = 0; i < plan.shards.size(); ++i) {
        const std::string name = weights_shard_name(safe, first + i, total);
        TensorList shard;
        for (size_t idx : plan.shards[i]) {
            shard.push_back(sd[idx]);
            weight_map.emplace_back(sd[idx].first, name);
        }
        write_weights_file(join(dir, name), shard, safe);
        written.push_back(name);
    }
    return written;
}

void write_weights_index(const std::string &dir, bool safe, uint64_t total_size,
                         const std::vector<std::pair<std::string, std::string>> &weight_map)
{
    const std::string index_name = safe ? "model.safetensors.index.json" : "pytorch_model.bin.index.json";
    std::string text = index_json(total_size, weight_map);
    const std::string tmp = join(dir, "." + index_name + ".accel-tmp");
    write_file_durably(tmp, text.data(), text.size());
    if (std::rename(tmp.c_str(), join(dir, index_name).c_str()) != 0) fail_errno(errno, "cannot rename to", join(dir, index_name));
}

void write_model_weights(const std::string &dir, const TensorList &sd, bool safe, uint64_t max_shard_size)
{
    make_dirs(dir);
    const ShardPlan plan = plan_shards(sd, max_shard_size);
    const size_t k = plan.shards.size();
    remove_stale_shards(dir, safe, k);
    std::vector<std::pair<std::string, std::string>> weight_map;
    if (k == 0) write_weights_file(join(dir, weights_shard_name(safe, 0, 1)), {}, safe);
    write_weight_shards(dir, sd, plan, safe, 0, k, weight_map);
    if (k > 1) write_weights_index(dir, safe, plan.total_size, weight_map);
    fsync_dir(dir);
}

TensorList read_weights_file(const std::string &path)
{
    const bool st = path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
    return st ? load_safetensors(path).tensors : tensors_from_pickle(*load_torch_file(path), path);
}

// Accelerate's load_checkpoint_in_model order (utils/modeling.py): a folder's whole state dict first
// (pytorch_model.bin, then model.safetensors), else its one *.index.json; a file named *.json is an index. So a
// folder holding both a whole file and shards (a sharded save over an older whole one) reads as Accelerate reads it.
TensorList read_model_weights(const std::string &path_in)
{
    const std::string path = normalize_path(path_in);
    const auto ends_with = [](const std::string &s, const std::string &end) {
        return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
    };
    std::string index;
    std::vector<std::string> files;
    if (is_dir(path)) {
        for (const char *whole : {"pytorch_model.bin", "model.safetensors"})
            if (files.empty() && exists(join(path, whole))) files.push_back(join(path, whole));
        if (files.empty()) {
            std::vector<std::string> indexes;
            for (const auto &f : list_dir(path))
                if (ends_with(f, ".index.json")) indexes.push_back(f);
            if (indexes.empty())
                fail(ACCEL_ERR_NOT_FOUND, "path: \"" + path + "\" holds no pytorch_model.bin, model.safetensors or *.index.json");
            std::sort(indexes.begin(), indexes.end());
            if (indexes.size() > 1)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "path: \"" + path + "\" holds more than one .index.json (" + indexes[0] +
                                                     ", " + indexes[1] + "); delete the irrelevant ones");
            index = join(path, indexes.front());
        }
    } else if (exists(path)) {
        if (ends_with(path, ".json")) index = path;
        else files.push_back(path);
    } else {
        fail(ACCEL_ERR_NOT_FOUND, "path: \"" + path + "\" does not exist");
    }
    if (!index.empty())
        for (const auto &f : index_shard_files(index)) files.push_back(join(parent_of(index), f));
    TensorList all;
    for (const auto &f : files) {
        for (auto &e : read_weights_file(f)) all.push_back(std::move(e));
    }
    return all;
}

} // namespace accel::ckpt
