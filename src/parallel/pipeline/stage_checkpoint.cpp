#include "parallel/pipeline/stage_checkpoint.hpp"

#include "checkpointing/pickle.hpp"
#include "checkpointing/weight_shards.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "config/checkpoint_options.hpp"
#include "distributed/agreement.hpp"
#include "distributed/communicator.hpp"
#include "model/model.hpp"
#include "model/pretrained.hpp"
#include "ops/object_collectives.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "state/state_dict.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <unordered_map>

namespace accel::parallel::pp {

namespace {

using WeightMap = std::vector<std::pair<std::string, std::string>>;

// Every rank's value, in pp rank (stage) order (collective).
std::vector<int64_t> gathered_values(distributed::Communicator &pp, int64_t mine)
{
    std::vector<int64_t> out;
    for (const auto &t : pp.allgather(at::scalar_tensor(mine, at::kLong).reshape({1}))) out.push_back(t.item<int64_t>());
    return out;
}

// Per name of the whole model's state dict (tied names too: every stage lists them all), the first stage that
// holds the tensor (a stage's other tensors have no elements); stage 0 when none does (an empty tensor is
// written where one process writes it). Collective.
std::unordered_map<std::string, int32_t> owners_by_name(const NamedTensors &all, distributed::Communicator &pp)
{
    at::Tensor held = at::zeros({static_cast<int64_t>(all.size())}, at::kLong);
    for (size_t i = 0; i < all.size(); ++i)
        if (all[i].second.numel() > 0) held[static_cast<int64_t>(i)] = 1;
    const std::vector<at::Tensor> holders = pp.allgather(held);
    std::unordered_map<std::string, int32_t> out;
    for (size_t i = 0; i < all.size(); ++i) {
        int32_t owner = 0;
        while (owner < pp.size() && holders[static_cast<size_t>(owner)][static_cast<int64_t>(i)].item<int64_t>() == 0) ++owner;
        out.emplace(all[i].first, owner == pp.size() ? 0 : owner);
    }
    return out;
}

// Every rank's outcome agreed over the group; on a failure each rank removes the shards it wrote first.
void agree_or_remove(distributed::Communicator &pp, std::exception_ptr failure, const std::string &dir,
                     const std::vector<std::string> &written)
{
    try {
        distributed::agree(&pp, failure);
    } catch (...) {
        for (const auto &name : written) {
            try {
                remove_all(join(dir, name));
            } catch (...) {
            }
        }
        throw;
    }
}

// A stage's part of the index as text (its shards' total bytes, then "name\tfile" lines), and every stage's joined.
std::string weight_map_text(uint64_t total_size, const WeightMap &map)
{
    std::string out = std::to_string(total_size) + "\n";
    for (const auto &[name, file] : map) out += name + "\t" + file + "\n";
    return out;
}

uint64_t joined_weight_map(const std::vector<std::string> &texts, WeightMap &map)
{
    uint64_t total = 0;
    for (const auto &text : texts) {
        std::istringstream in(text);
        std::string line;
        std::getline(in, line);
        total += std::stoull(line);
        while (std::getline(in, line)) {
            const size_t tab = line.find('\t');
            map.emplace_back(line.substr(0, tab), line.substr(tab + 1));
        }
    }
    return total;
}


// The "state" entries of a stage's optimizer state dict sent to `dst` point to point: pickled with each tensor
// replaced by a marker holding its dtype and shape, the pickle's length and bytes, then each tensor's values in the
// entries' order. The tensors go one at a time as they are (the state dict's are views of a unit's gathered state,
// already contiguous): no copy of the stage's state is made to send it.
constexpr int32_t kStateTag = 7300; // apart from the schedule's transfers (none run during a checkpoint)
const char *const kTensorMark = "accel.stage_state.tensor";

void send_stage_state(distributed::Communicator &pp, const PyObj &state, int32_t dst)
{
    std::vector<at::Tensor> tensors;
    auto marked = py_dict();
    for (const auto &[id, entry] : state.map) {
        auto e = py_dict();
        for (const auto &[key, value] : entry->map) {
            if (value->kind != PyObj::Kind::Tensor) {
                e->map.emplace_back(key, value);
                continue;
            }
            std::vector<PyRef> sizes;
            for (const int64_t d : value->tensor.sizes()) sizes.push_back(py_int(d));
            e->map.emplace_back(key, py_tuple({py_str(kTensorMark), py_int(static_cast<int64_t>(value->tensor.scalar_type())),
                                               py_tuple(std::move(sizes))}));
            tensors.push_back(value->tensor);
        }
        marked->map.emplace_back(id, e);
    }
    const std::string bytes = ckpt::pickle_dumps(*marked, [](const at::Tensor &) -> ckpt::StorageRef {
        fail(ACCEL_ERR_INTERNAL, "save_state: a stage's optimizer state holds a tensor outside its entries");
    });
    pp.send(at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong), dst, kStateTag);
    at::Tensor raw = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::memcpy(raw.data_ptr(), bytes.data(), bytes.size());
    pp.send(raw, dst, kStateTag);
    // An empty tensor has no values to send (Gloo refuses a message without a buffer): its marker is enough.
    for (const auto &t : tensors)
        if (t.numel() > 0) pp.send(t.detach().contiguous(), dst, kStateTag);
}

// What send_stage_state sent: the markers replaced by the tensors, received in the entries' order.
PyRef recv_stage_state(distributed::Communicator &pp, int32_t src)
{
    const std::string what = "save_state: stage " + std::to_string(src) + "'s optimizer state";
    at::Tensor size = at::empty({1}, at::kLong);
    pp.recv(size, src, kStateTag);
    at::Tensor raw = at::empty({size.item<int64_t>()}, at::kByte);
    pp.recv(raw, src, kStateTag);
    PyRef state = ckpt::pickle_loads(raw.data_ptr<uint8_t>(), static_cast<size_t>(raw.numel()),
                                     [&what](const std::string &, at::ScalarType, int64_t) -> at::Tensor {
                                         fail(ACCEL_ERR_INTERNAL, what + ": holds a storage");
                                     },
                                     what);
    for (auto &[id, entry] : state->map)
        for (auto &[key, value] : entry->map) {
            const bool marker = value->kind == PyObj::Kind::Tuple && value->items.size() == 3 &&
                                value->items[0]->kind == PyObj::Kind::Str && value->items[0]->s == kTensorMark;
            if (!marker) continue;
            std::vector<int64_t> sizes;
            for (const auto &d : value->items[2]->items) sizes.push_back(d->i);
            at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(value->items[1]->i)));
            if (t.numel() > 0) pp.recv(t, src, kStateTag);
            value = py_tensor(t);
        }
    return state;
}

} // namespace

bool near_writer(const Model &model, bool writes)
{
    const tp::SplitModel split = tp::split_of(model);
    if (!split) return writes;
    for (const auto &flag : split.group->allgather(at::full({1}, writes ? 1 : 0, at::kLong)))
        if (flag.item<int64_t>() != 0) return true;
    return false;
}

bool saves_by_stage(const config::SaveModelOptions &options, bool save_on_each_node)
{
    return !options.adapter_only && !options.merge && !save_on_each_node;
}

void save_model_by_stage(const Model &model, PipelineParallel &pipeline, const std::string &dir,
                         const config::SaveModelOptions &options, bool writes)
{
    distributed::Communicator &pp = *pipeline.pp_group();
    const std::vector<int64_t> writers = gathered_values(pp, writes ? 1 : 0);
    if (std::find(writers.begin(), writers.end(), 1) == writers.end()) return; // another tp / dp rank's group
    const bool safe = options.safe_serialization;
    const int32_t stage = pp.rank();
    const auto owner = owners_by_name(model.state_dict(false), pp);
    NamedTensors mine;
    for (auto &entry : model.state_dict(safe)) // deduplicated as one process's: a tied head under its first name
        if (owner.at(entry.first) == stage) mine.push_back(std::move(entry));
    const ckpt::ShardPlan plan = ckpt::plan_shards(mine, options.max_shard_size);
    const std::vector<int64_t> counts = gathered_values(pp, static_cast<int64_t>(plan.shards.size()));
    const auto first = static_cast<size_t>(std::accumulate(counts.begin(), counts.begin() + stage, int64_t{0}));
    const auto total = static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
    std::exception_ptr failure;
    std::vector<std::string> written;
    WeightMap map;
    try {
        make_dirs(dir);
        if (writes) ckpt::remove_stale_shards(dir, safe, total);
        written = ckpt::write_weight_shards(dir, mine, plan, safe, first, total, map);
        fsync_dir(dir);
    } catch (...) {
        failure = std::current_exception();
    }
    agree_or_remove(pp, failure, dir, written);
    // The index, once every shard is in place (the main process's: it holds the other stages' parts of it).
    const std::string text = weight_map_text(plan.total_size, map);
    const std::vector<std::string> texts = ops::gather_object(pp, {text, ""}, "save_model");
    try {
        if (writes) {
            WeightMap all;
            const uint64_t total_size = joined_weight_map(texts, all);
            if (total > 1) ckpt::write_weights_index(dir, safe, total_size, all);
            write_pretrained_config(model, dir);
            fsync_dir(dir);
        }
    } catch (...) {
        failure = std::current_exception();
    }
    agree_or_remove(pp, failure, dir, written);
}

PyRef joined_stage_optimizer_state(PipelineParallel &pipeline, PyRef mine, bool near_writer)
{
    distributed::Communicator &pp = *pipeline.pp_group();
    // Each stage whose flag is set gets the join: the first stage, with the main process; under save_on_each_node
    // each node's writer, whichever stage it holds. The others send theirs to each of them in turn.
    const std::vector<int64_t> writers = gathered_values(pp, near_writer ? 1 : 0);
    if (std::find(writers.begin(), writers.end(), 1) == writers.end()) return mine;
    const PyObj *state = mine->get("state");
    if (state == nullptr || !state->is_dict()) fail(ACCEL_ERR_INTERNAL, "save_state: a stage's optimizer state dict has no state");
    // One process's order: by parameter id, each once (the first stage's entry of a parameter two stages hold).
    std::map<int64_t, PyRef> by_id;
    auto add = [&by_id](const PyObj &entries) {
        for (const auto &[id, entry] : entries.map)
            if (id->kind == PyObj::Kind::Int) by_id.emplace(id->i, entry);
    };
    for (int32_t w = 0; w < pp.size(); ++w) {
        if (writers[static_cast<size_t>(w)] == 0) continue;
        if (pp.rank() != w) {
            send_stage_state(pp, *state, w);
            continue;
        }
        for (int32_t s = 0; s < pp.size(); ++s) add(s == w ? *state : *recv_stage_state(pp, s));
    }
    if (by_id.empty()) return mine; // not a writer
    auto joined = py_dict();
    for (auto &[id, entry] : by_id) joined->map.emplace_back(py_int(id), entry);
    auto out = std::make_shared<PyObj>(*mine);
    for (auto &[key, value] : out->map)
        if (key->kind == PyObj::Kind::Str && key->s == "state") value = joined;
    return out;
}

void send_stage_entries(distributed::Communicator &pp, const PyObj &entries, int32_t dst) { send_stage_state(pp, entries, dst); }

PyRef recv_stage_entries(distributed::Communicator &pp, int32_t src) { return recv_stage_state(pp, src); }

} // namespace accel::parallel::pp
