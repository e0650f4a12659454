// prepare of a pipeline (src/parallel/pipeline) on thread ranks: a config it refuses is refused before the model
// changes (no tp split, no stage cut), so the user's model stays whole and usable - and can be prepared again
// with a good config; and a model cut into a stage without a pipeline says so when run whole.
#include "catch_error.hpp"
#include "common/error.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/gpt_model.hpp"
#include "model/model.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace pp = accel::parallel::pp;

namespace {

std::shared_ptr<accel::Model> gpt(int64_t layers)
{
    const std::string json = R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": )" +
                             std::to_string(layers) + "}";
    at::manual_seed(41); // every rank and the reference alike
    auto m = accel::make_model_from_json(json.c_str());
    m->train(false);
    return m;
}

// `m` is `ref` as built: every parameter whole and equal, and its forward one process's.
void expect_whole(accel::Model &m, accel::Model &ref, const at::Tensor &ids, int rank)
{
    ASSERT_EQ(m.named_parameters().size(), ref.named_parameters().size());
    for (size_t i = 0; i < m.named_parameters().size(); ++i) {
        const auto &[name, p] = m.named_parameters()[i];
        const at::Tensor &want = ref.named_parameters()[i].second;
        ASSERT_EQ(p.sizes(), want.sizes()) << name << " on rank " << rank;
        EXPECT_TRUE(p.equal(want)) << name << " on rank " << rank;
    }
    EXPECT_TRUE(m.forward(ids).allclose(ref.forward(ids))) << "rank " << rank;
}

// A refused config on `stages` x `tp` thread ranks leaves every rank's model whole; the same model then
// prepares with a good config and its pipeline's forward is one process's.
void check_refused_leaves_model(int32_t stages, int32_t tp, int64_t layers, const accel::config::ParallelismConfig &bad,
                                const std::string &named)
{
    SCOPED_TRACE(named + " on pp " + std::to_string(stages) + " x tp " + std::to_string(tp));
    const int32_t world = stages * tp;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= world; ++r) models.push_back(gpt(layers));
    auto &ref = *models.back();
    at::manual_seed(43);
    const at::Tensor ids = at::randint(0, 37, {4, 8}, at::kLong);
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, tp, stages), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const accel::Error e = catch_error([&] { pp::prepare_pipeline(m, mesh, bad); });
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT) << e.what();
        EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
        EXPECT_FALSE(dynamic_cast<accel::GptModel &>(m).pipelined());
        expect_whole(m, ref, ids, comm->rank());
        comm->barrier();
        accel::config::ParallelismConfig good;
        good.pp_size = stages;
        good.tp_size = tp;
        good.num_micro_batches = 2;
        auto pipeline = pp::prepare_pipeline(m, mesh, good);
        const at::Tensor logits = m.forward(ids);
        const at::Tensor want = ref.forward(ids);
        if (tp == 1) {
            EXPECT_TRUE(logits.allclose(want, 1e-5, 1e-6)) << "rank " << comm->rank();
        } else { // this rank's vocabulary columns (vocabulary-parallel logits)
            EXPECT_EQ(logits.size(-1), (37 + tp - 1) / tp) << "rank " << comm->rank();
        }
    });
}

TEST(PipelinePrepare, InterleavedMicroBatchesRefusedBeforeTheCut)
{
    accel::config::ParallelismConfig bad;
    bad.pp_size = 2;
    bad.pp_schedule = "interleaved_1f1b";
    bad.num_virtual_stages_per_pipeline_rank = 2;
    bad.num_micro_batches = 3; // not a multiple of pp_size
    check_refused_leaves_model(2, 1, 4, bad, "parallelism_config.num_micro_batches: 3 is not a multiple of pp_size (2)");
    // pp x tp: refused before the tp split as well.
    bad.tp_size = 2;
    check_refused_leaves_model(2, 2, 4, bad, "parallelism_config.num_micro_batches: 3 is not a multiple of pp_size (2)");
}

TEST(PipelinePrepare, StageCutRefusalsLeaveTheModel)
{
    accel::config::ParallelismConfig bad;
    bad.pp_size = 2;
    bad.tp_size = 2;
    bad.pp_split_points = {4}; // the model has 4 blocks: the last stage would hold none
    check_refused_leaves_model(2, 2, 4, bad, "parallelism_config.pp_split_points");
    bad.pp_split_points.clear();
    bad.pp_schedule = "interleaved_1f1b";
    bad.num_layers_per_virtual_pipeline_stage = 3; // 4 blocks do not divide into 2 x 3
    bad.num_micro_batches = 2;
    check_refused_leaves_model(2, 2, 4, bad, "parallelism_config.num_layers_per_virtual_pipeline_stage");
}

// A stage cut without a pipeline (apply_pipeline_stage alone) says that none was set, not that one is gone.
TEST(PipelinePrepare, CutWithoutPipelineSaysNoneWasSet)
{
    auto m = gpt(2);
    auto &g = dynamic_cast<accel::GptModel &>(*m);
    g.apply_pipeline_stage(0, 1, true, false);
    const accel::Error e = catch_error([&] { m->forward(at::zeros({1, 4}, at::kLong)); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("forward of a pipeline stage"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("none was set"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("freed"), std::string::npos) << e.what();
}

} // namespace
