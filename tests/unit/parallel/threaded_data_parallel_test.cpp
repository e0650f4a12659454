// DDP and the sharding engine on 2 and 4 ranks played by threads (distributed/thread_communicator): after a
// step with gradient accumulation (one micro-batch inside no_sync, one synchronised), every rank's gradient
// equals one process's on the same global batch. The gradient is read through a plain SGD step (p -= g):
// for the sharding engine the gradients live in the shards, and the stepped shards gathered back into the
// model are what every strategy must agree on. The multi-process tests (tests/distributed) cover the real
// backends; these run in milliseconds.
//
// Threads: LibTorch runs a CPU backward on the thread that calls it, so each rank's gradient hooks (DDP's
// buckets, the engine's reductions) fire on that rank's thread. ctest runs with OMP_NUM_THREADS=1 (one
// intra-op thread): N rank threads already share the cores. Models are built on the test's thread, before
// the ranks start: the default generator is one for the process, and ranks drawing from it at once would
// get different weights from run to run.
#include "config/accelerator_config.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/ddp.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "precision/autocast.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;

namespace {

constexpr const char *kMlp = "{\"type\": \"mlp\", \"widths\": [6, 16, 16, 3]}";
constexpr int64_t kMicro = 8; // rows of one global micro-batch; two micro-batches per step

struct Batch {
    at::Tensor x, y; // [2 * kMicro, 6], [2 * kMicro, 3]
};

Batch global_batch()
{
    at::manual_seed(11);
    return {at::randn({2 * kMicro, 6}), at::randn({2 * kMicro, 3})};
}

std::shared_ptr<accel::Model> make_model()
{
    at::manual_seed(5);
    return accel::make_model_from_json(kMlp);
}

at::Tensor mse(const at::Tensor &out, const at::Tensor &y) { return accel::compute_loss(accel::Loss{accel::LossKind::Mse}, out, y); }

// Rank r's rows of global micro-batch k: each rank takes an equal, consecutive share.
at::Tensor rows(const at::Tensor &t, int64_t k, int32_t rank, int32_t world)
{
    const int64_t n = kMicro / world;
    return t.narrow(0, k * kMicro + rank * n, n);
}

// The parameters after one SGD step (lr 1) on the global batch in one process: micro-batch 0 then 1, the
// gradients accumulating.
std::vector<at::Tensor> reference_step(const Batch &b)
{
    auto model = make_model();
    for (int64_t k = 0; k < 2; ++k)
        mse(model->forward(b.x.narrow(0, k * kMicro, kMicro)), b.y.narrow(0, k * kMicro, kMicro)).backward();
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> out;
    for (auto &p : model->parameters()) out.push_back((p - p.grad()).clone());
    return out;
}

void sgd(const std::vector<at::Tensor> &params)
{
    at::NoGradGuard no_grad;
    for (auto p : params)
        if (p.grad().defined()) p.sub_(p.grad());
}

void expect_params(const std::vector<at::Tensor> &got, const std::vector<at::Tensor> &want, const std::string &what)
{
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-6))
            << what << ": parameter " << i << " differs by " << (got[i] - want[i]).abs().max().item<float>();
}

// The step must move the weights visibly, or equal results would prove nothing.
TEST(ThreadedDataParallel, ReferenceStepMovesTheWeights)
{
    const auto want = reference_step(global_batch());
    const auto before = make_model()->parameters();
    float moved = 0;
    for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, (want[i] - before[i]).abs().max().item<float>());
    EXPECT_GT(moved, 1e-2);
}

void ddp_matches_one_process(int32_t world)
{
    const Batch b = global_batch();
    const auto want = reference_step(b);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r < world; ++r) {
        models.push_back(make_model());
        if (r > 0) { // DDP broadcasts rank 0's weights when it wraps the model
            at::NoGradGuard no_grad;
            for (auto p : models.back()->parameters()) p.add_(static_cast<double>(r));
        }
    }
    std::vector<std::vector<at::Tensor>> got(static_cast<size_t>(world));
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        accel::Model &model = *models[static_cast<size_t>(r)];
        accel::config::DistributedDataParallelKwargs kwargs;
        accel::parallel::DistributedDataParallel ddp(model.named_parameters(), model.named_buffers(), comm, kwargs);
        ddp.set_require_sync(false); // accumulate(): no_sync on the first micro-batch
        mse(model.forward(rows(b.x, 0, r, world)), rows(b.y, 0, r, world)).backward();
        ddp.finish_backward();
        ddp.set_require_sync(true);
        mse(model.forward(rows(b.x, 1, r, world)), rows(b.y, 1, r, world)).backward();
        ddp.finish_backward();
        sgd(model.parameters());
        got[static_cast<size_t>(r)] = model.parameters();
    });
    for (int32_t r = 0; r < world; ++r)
        expect_params(got[static_cast<size_t>(r)], want, "ddp, " + std::to_string(world) + " ranks, rank " + std::to_string(r));
}

TEST(ThreadedDataParallel, DdpTwoRanks) { ddp_matches_one_process(2); }
TEST(ThreadedDataParallel, DdpFourRanks) { ddp_matches_one_process(4); }

// One step of the sharding engine configured by `plugin` (accelerator JSON); `hybrid`: HYBRID_SHARD over
// nodes of that many ranks (the topology the config parser would take from the launcher).
void sharded_matches_one_process(int32_t world, const std::string &plugin, int32_t hybrid = 0)
{
    const Batch b = global_batch();
    const auto want = reference_step(b);
    accel::config::ShardingConfig cfg = accel::config::parse_accelerator_config(("{" + plugin + "}").c_str()).sharding;
    if (hybrid > 0) {
        cfg.strategy = "HYBRID_SHARD";
        cfg.hybrid_group_size = hybrid;
    }
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r < world; ++r) models.push_back(make_model());
    std::vector<std::vector<at::Tensor>> got(static_cast<size_t>(world));
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        accel::Model &model = *models[static_cast<size_t>(r)];
        accel::parallel::ShardedDataParallel engine(model, comm, cfg);
        engine.set_require_sync(false);
        mse(accel::forward(model, rows(b.x, 0, r, world), true), rows(b.y, 0, r, world)).backward();
        engine.finish_backward();
        engine.set_require_sync(true);
        mse(accel::forward(model, rows(b.x, 1, r, world), true), rows(b.y, 1, r, world)).backward();
        engine.finish_backward();
        sgd(engine.optimizer_params());
        engine.after_optimizer_step();
        engine.summon_full_params(true);
        for (const auto &p : model.parameters()) got[static_cast<size_t>(r)].push_back(p.detach().clone());
        engine.summon_full_params(false);
    });
    for (int32_t r = 0; r < world; ++r)
        expect_params(got[static_cast<size_t>(r)], want, plugin + ", " + std::to_string(world) + " ranks, rank " + std::to_string(r));
}

const char *kUnits = ", \"auto_wrap_policy\": \"SIZE_BASED_WRAP\", \"min_num_params\": 50";

TEST(ThreadedDataParallel, FsdpStrategies)
{
    for (int32_t world : {2, 4})
        for (std::string strategy : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}) {
            sharded_matches_one_process(world, "\"fsdp_plugin\": {\"sharding_strategy\": \"" + strategy + "\"}");
            sharded_matches_one_process(world, "\"fsdp_plugin\": {\"sharding_strategy\": \"" + strategy + "\"" + kUnits + "}");
        }
}

TEST(ThreadedDataParallel, ZeroStages)
{
    for (int32_t world : {2, 4})
        for (int stage = 0; stage <= 3; ++stage)
            sharded_matches_one_process(world, "\"deepspeed_plugin\": {\"zero_stage\": " + std::to_string(stage) + "}");
}

TEST(ThreadedDataParallel, HybridShard)
{
    sharded_matches_one_process(4, std::string("\"fsdp_plugin\": {\"sharding_strategy\": \"FULL_SHARD\"") + kUnits + "}", 2);
}

} // namespace
