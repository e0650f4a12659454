#include "parallel/tensor_parallel/rng_checkpoint.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "parallel/tensor_parallel/split_model.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>

#include <algorithm>

namespace accel::parallel::tp {

namespace {

const std::string kStates = "rng_tracker_states", kMesh = "rng_tracker_tp";

std::string tracker_name(size_t model_index)
{
    return model_index == 0 ? "model-parallel-rng" : "model-parallel-rng." + std::to_string(model_index);
}

// The split models' generators by prepared index, and the tp group they share (null when no model is split).
struct Trackers {
    std::vector<std::pair<size_t, std::shared_ptr<DropoutGenerator>>> generators;
    std::shared_ptr<distributed::Communicator> group;
};

Trackers trackers_of(const std::vector<std::shared_ptr<Model>> &models)
{
    Trackers out;
    for (size_t i = 0; i < models.size(); ++i) {
        const auto *split = dynamic_cast<const TensorParallelModel *>(models[i].get());
        if (split == nullptr || !split->tensor_parallel_group()) continue;
        if (auto g = split->tensor_parallel_dropout()) {
            out.generators.emplace_back(i, std::move(g));
            out.group = split->tensor_parallel_group();
        }
    }
    return out;
}

[[noreturn]] void bad(const std::string &what, const std::string &problem)
{
    fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + kStates + "\" " + problem);
}

} // namespace

void add_tracker_states(PyObj &random_states, const std::vector<std::shared_ptr<Model>> &models)
{
    const Trackers t = trackers_of(models);
    if (t.generators.empty()) return;
    auto states = py_dict();
    for (const auto &[i, g] : t.generators) py_set(*states, tracker_name(i), py_tensor(g->state()));
    py_set(random_states, kStates, states);
    py_set(random_states, kMesh, py_list({py_int(t.group->rank()), py_int(t.group->size())}));
}

ApplyState take_tracker_states(PyObj &random_states, const std::vector<std::shared_ptr<Model>> &models,
                               const std::string &what)
{
    PyRef states, mesh;
    auto &map = random_states.map;
    for (auto it = map.begin(); it != map.end();) {
        const bool str = it->first->kind == PyObj::Kind::Str;
        if (str && it->first->s == kStates) states = it->second;
        else if (str && it->first->s == kMesh) mesh = it->second;
        else {
            ++it;
            continue;
        }
        it = map.erase(it);
    }
    if (!states) return [] {};
    if (!states->is_dict()) bad(what, "is not a dict");
    for (const auto &[k, v] : states->map) {
        if (k->kind != PyObj::Kind::Str || v->kind != PyObj::Kind::Tensor || v->tensor.scalar_type() != at::kByte)
            bad(what, "holds something other than uint8 generator states by name");
        try { // on a generator of its own, so that a bad state changes nothing
            at::make_generator<at::CPUGeneratorImpl>().set_state(v->tensor.contiguous());
        } catch (const c10::Error &) {
            bad(what, "[\"" + k->s + "\"] is not a CPU generator state of this LibTorch");
        }
    }
    const bool mesh_ok = mesh && (mesh->kind == PyObj::Kind::List || mesh->kind == PyObj::Kind::Tuple) &&
                         mesh->items.size() == 2 &&
                         std::all_of(mesh->items.begin(), mesh->items.end(), [](const PyRef &v) { return v->kind == PyObj::Kind::Int; });
    if (!mesh_ok)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + kMesh + "\" is missing or not [tp rank, tp size] beside \"" + kStates + "\"");
    const Trackers t = trackers_of(models);
    if (t.generators.empty() || mesh->items[0]->i != t.group->rank() || mesh->items[1]->i != t.group->size())
        return [] {}; // another mesh: the generators seeded at prepare stay (rng_checkpoint.hpp)
    std::vector<std::pair<std::shared_ptr<DropoutGenerator>, at::Tensor>> restore;
    for (const auto &[i, g] : t.generators)
        if (const PyObj *s = states->get(tracker_name(i))) restore.emplace_back(g, s->tensor.contiguous());
    return [restore] {
        for (const auto &[g, s] : restore) g->set_state(s);
    };
}

} // namespace accel::parallel::tp
