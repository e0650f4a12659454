// save_model of a pipeline model stage by stage (stage_checkpoint.hpp, issue 36): each stage writes its own shards of
// transformers' folder under the whole model's names, the main process the index; the folder loads in one process
// bit for bit, at pp 2, pp 4 (several shards per stage under a small max_shard_size), llama, and pp 2 x tp 2 (the
// stage's tp group gathers its slices first; tp rank 0's group writes). A stage that cannot write fails every rank
// and leaves no shard and no index; a damaged or missing shard then fails the load naming it.
#include "accelerator/accelerator.hpp"
#include "catch_error.hpp"
#include "checkpointing/checkpointing.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "config/checkpoint_options.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "fresh_dir.hpp"
#include "model/model.hpp"
#include "model/pretrained.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/stage_checkpoint.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "pipeline_models.hpp"
#include "state/state_dict.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace dist = accel::distributed;
namespace pp = accel::parallel::pp;

namespace {

std::string gpt_json(int64_t layers, bool tied)
{
    return std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": )") +
           std::to_string(layers) + ", \"tie_word_embeddings\": " + (tied ? "true" : "false") + "}";
}

struct Case {
    std::string json;
    int32_t pp = 2, tp = 1;
    uint64_t max_shard_size = 10000000000ULL;
    bool safe = true; // false: the pickle layout (pytorch_model-0000i-of-0000n.bin + pytorch_model.bin.index.json)
};

// Every rank saves the model by stage into `dir` (the tp slices gathered first, as save_model does).
void save_by_stage(const Case &c, const std::string &dir, std::vector<accel::Error> *errors = nullptr)
{
    const int32_t world = c.pp * c.tp;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r < world; ++r) {
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(c.json.c_str()));
    }
    if (errors != nullptr) errors->assign(static_cast<size_t>(world), accel::Error(ACCEL_OK, ""));
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, c.tp, c.pp), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        accel::config::ParallelismConfig config;
        config.pp_size = c.pp;
        config.tp_size = c.tp;
        config.num_micro_batches = 2;
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        accel::config::SaveModelOptions options;
        options.max_shard_size = c.max_shard_size;
        options.safe_serialization = c.safe;
        auto save = [&] {
            std::unique_ptr<accel::parallel::tp::WholeForCheckpoint> whole;
            if (c.tp > 1) whole = std::make_unique<accel::parallel::tp::WholeForCheckpoint>(
                std::vector<accel::parallel::tp::WholeForCheckpoint::Part>{{&m, {}}});
            pp::save_model_by_stage(m, *pipeline, dir, options, comm->rank() == 0);
        };
        if (errors != nullptr) (*errors)[static_cast<size_t>(comm->rank())] = catch_error(save);
        else save();
        // Afterwards the stage holds only its own tensors again (nothing borrowed).
        int64_t held = 0;
        for (const auto &np : m.named_parameters()) held += np.second.numel() > 0 ? 1 : 0;
        EXPECT_LT(held, static_cast<int64_t>(m.named_parameters().size())) << "rank " << comm->rank();
    });
}

std::string text_of(const std::string &path)
{
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::string> shard_files(const std::string &dir, bool safe)
{
    std::vector<std::string> out;
    for (const auto &name : accel::list_dir(dir))
        if (name.rfind(safe ? "model-" : "pytorch_model-", 0) == 0) out.push_back(name);
    return out;
}

void check_loads_as_one_process(const Case &c, size_t min_shards)
{
    SCOPED_TRACE(c.json + " pp " + std::to_string(c.pp) + " tp " + std::to_string(c.tp));
    const std::string dir = fresh_dir("by_stage_" + std::to_string(c.pp) + "_" + std::to_string(c.tp));
    save_by_stage(c, dir);
    at::manual_seed(41);
    const auto ref = accel::make_model_from_json(c.json.c_str());
    const std::string one = fresh_dir("one_process");
    accel::config::SaveModelOptions options;
    options.safe_serialization = c.safe;
    accel::write_pretrained(*ref, one, options);
    const std::vector<std::string> shards = shard_files(dir, c.safe);
    const std::string index_name = c.safe ? "model.safetensors.index.json" : "pytorch_model.bin.index.json";
    EXPECT_GE(shards.size(), min_shards);
    ASSERT_TRUE(accel::exists(accel::join(dir, index_name)));
    EXPECT_FALSE(accel::exists(accel::join(dir, c.safe ? "model.safetensors" : "pytorch_model.bin")));
    EXPECT_EQ(text_of(accel::join(dir, "config.json")), text_of(accel::join(one, "config.json")));
    // One process's tensors, each once (a tied embedding under its first name), bit for bit.
    const auto got = accel::ckpt::read_model_weights(dir);
    const auto want = ref->state_dict(c.safe); // the pickle keeps a tied head under both names, as one process's
    ASSERT_EQ(got.size(), want.size());
    std::map<std::string, at::Tensor> by_name(got.begin(), got.end());
    for (const auto &[name, t] : want) {
        ASSERT_TRUE(by_name.count(name)) << name;
        EXPECT_TRUE(at::equal(by_name.at(name), t)) << name;
    }
    // The index names every tensor's shard, and every shard is named.
    const std::string index = text_of(accel::join(dir, index_name));
    for (const auto &s : shards) EXPECT_NE(index.find('"' + s + '"'), std::string::npos) << s;
    // Loaded by the loaders into one process's model.
    at::manual_seed(7);
    const auto fresh = accel::make_model_from_json(c.json.c_str());
    EXPECT_TRUE(accel::load_checkpoint_in_model(*fresh, dir, {}).empty());
    for (const auto &[name, t] : fresh->state_dict(false)) EXPECT_TRUE(at::equal(t, *ref->find_tensor(name))) << name;
}

TEST(PipelineStageCheckpoint, SaveModelShardsLoadAsOneProcess)
{
    check_loads_as_one_process({gpt_json(4, true), 2}, 2);
    check_loads_as_one_process({gpt_json(4, false), 4, 1, 2000}, 8); // several shards per stage
    check_loads_as_one_process({accel_test::llama_json(4, true), 2}, 2);
    check_loads_as_one_process({accel_test::llama_json(3, false), 2, 2}, 2);
    check_loads_as_one_process({gpt_json(4, true), 2, 2}, 2);
    check_loads_as_one_process({gpt_json(4, true), 2, 1, 10000000000ULL, false}, 2); // safe_serialization false
}

// A stage that cannot write its shard (a folder in its place) fails every rank with its message; the other stage's
// shard is removed and no index written. A missing shard then fails the load by name.
TEST(PipelineStageCheckpoint, FailedStageLeavesNothing)
{
    const Case c{gpt_json(4, true), 2};
    const std::string dir = fresh_dir("failed");
    accel::make_dirs(accel::join(dir, "model-00002-of-00002.safetensors"));
    std::vector<accel::Error> errors;
    save_by_stage(c, dir, &errors);
    for (const auto &e : errors) {
        EXPECT_NE(e.code(), ACCEL_OK);
        EXPECT_NE(std::string(e.what()).find("model-00002-of-00002.safetensors"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(accel::exists(accel::join(dir, "model-00001-of-00002.safetensors")));
    EXPECT_FALSE(accel::exists(accel::join(dir, "model.safetensors.index.json")));
    accel::remove_all(accel::join(dir, "model-00002-of-00002.safetensors"));
    save_by_stage(c, dir);
    // A damaged stage's shard (cut short) is DATA_LOSS naming it; a missing one NOT_FOUND naming it.
    const std::string second = accel::join(dir, "model-00002-of-00002.safetensors");
    ASSERT_EQ(::truncate(second.c_str(), 100), 0);
    const accel::Error damaged = catch_error([&] { accel::ckpt::read_model_weights(dir); });
    EXPECT_EQ(damaged.code(), ACCEL_ERR_DATA_LOSS) << damaged.what();
    EXPECT_NE(std::string(damaged.what()).find("model-00002-of-00002.safetensors"), std::string::npos) << damaged.what();
    accel::remove_all(second);
    const accel::Error e = catch_error([&] { accel::ckpt::read_model_weights(dir); });
    EXPECT_EQ(e.code(), ACCEL_ERR_NOT_FOUND) << e.what(); // as from_pretrained's missing shard (capi_test_pretrained)
    EXPECT_NE(std::string(e.what()).find("model-00002-of-00002.safetensors"), std::string::npos) << e.what();
}

// save_state's optimizer state under pp x sharding (joined_stage_optimizer_state): each stage's state dict holds its
// parameters' entries; the writer's first stage gets one process's (every id once, in id order, the first stage's
// entry of a parameter two stages hold, tensors and plain values as sent), the other stages keep theirs, and a pp
// group without a writer exchanges nothing (its dicts unchanged). Under save_on_each_node a node's writer may hold a
// later stage: the first and the last stage writing each get the same joined dict. pp 3 on 3 threads, ~10 ms.
accel::PyRef stage_state(const std::vector<std::pair<int64_t, float>> &entries)
{
    auto state = accel::py_dict();
    for (const auto &[id, value] : entries) {
        auto e = accel::py_dict();
        e->map.emplace_back(accel::py_str("step"), accel::py_float(3.0 + static_cast<double>(id)));
        e->map.emplace_back(accel::py_str("exp_avg"), accel::py_tensor(at::full({2, static_cast<int64_t>(id) + 1}, value)));
        state->map.emplace_back(accel::py_int(id), e);
    }
    auto groups = accel::py_list({accel::py_dict({{accel::py_str("lr"), accel::py_float(0.1)}})});
    return accel::py_dict({{accel::py_str("state"), state}, {accel::py_str("param_groups"), groups}});
}

TEST(PipelineStageCheckpoint, OptimizerStateJoinedOnTheWriter)
{
    const std::string json = gpt_json(3, true);
    // Stage s holds ids s and s + 3; stage 2 also holds id 0 (as the last stage holds the tied embedding).
    const std::vector<std::vector<std::pair<int64_t, float>>> held = {{{0, 1.f}, {3, 4.f}}, {{1, 2.f}, {4, 5.f}}, {{0, 9.f}, {2, 3.f}, {5, 6.f}}};
    for (const std::vector<int32_t> &writers : std::vector<std::vector<int32_t>>{{0}, {}, {0, 2}}) {
        std::vector<std::shared_ptr<accel::Model>> models;
        for (int32_t r = 0; r < 3; ++r) models.push_back(accel::make_model_from_json(json.c_str()));
        dist::run_on_threads(3, [&](const std::shared_ptr<dist::Communicator> &comm) {
            dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, 3), comm);
            auto &m = *models[static_cast<size_t>(comm->rank())];
            accel::config::ParallelismConfig config;
            config.pp_size = 3;
            config.num_micro_batches = 1;
            auto pipeline = pp::prepare_pipeline(m, mesh, config);
            const accel::PyRef mine = stage_state(held[static_cast<size_t>(comm->rank())]);
            const bool writes = std::find(writers.begin(), writers.end(), comm->rank()) != writers.end();
            const accel::PyRef got = pp::joined_stage_optimizer_state(*pipeline, mine, writes);
            if (!writes) {
                EXPECT_EQ(got, mine) << "rank " << comm->rank(); // nothing joined there
                return;
            }
            const accel::PyObj *state = got->get("state");
            ASSERT_NE(state, nullptr);
            ASSERT_EQ(state->map.size(), 6u);
            for (int64_t id = 0; id < 6; ++id) {
                const accel::PyObj &key = *state->map[static_cast<size_t>(id)].first;
                const accel::PyObj &entry = *state->map[static_cast<size_t>(id)].second;
                EXPECT_EQ(key.i, id);
                EXPECT_DOUBLE_EQ(entry.get("step")->f, 3.0 + static_cast<double>(id));
                const float want = id == 0 ? 1.f : static_cast<float>(id + 1); // id 0: the first stage's entry
                EXPECT_TRUE(at::equal(entry.get("exp_avg")->tensor, at::full({2, id + 1}, want))) << "id " << id;
            }
            ASSERT_NE(got->get("param_groups"), nullptr);
            EXPECT_DOUBLE_EQ(got->get("param_groups")->items.at(0)->get("lr")->f, 0.1);
        });
    }
}

} // namespace
