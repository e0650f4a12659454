// LoRA under DDP and the sharding engine (2 ranks played by threads, as threaded_data_parallel_test.cpp): the
// adapters are ordinary trainable parameters and the base is frozen, so after an SGD step every rank's adapters
// equal one process's on the same global batch, and no base weight moved.
#include "config/accelerator_config.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
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

constexpr const char *kSpec = R"({"type": "mlp", "widths": [6, 16, 16, 3],
    "lora": {"r": 4, "lora_alpha": 8, "target_modules": ["0", "2", "4"]}})";

std::shared_ptr<accel::Model> make_model()
{
    at::manual_seed(5);
    auto m = accel::make_model_from_json(kSpec);
    at::NoGradGuard no_grad;
    at::manual_seed(6);
    for (const auto &[name, p] : m->named_parameters()) // B = 0 would leave A without a gradient
        if (name.find("lora_B") != std::string::npos) at::Tensor(p).normal_(0.0, 0.5);
    return m;
}

struct Batch {
    at::Tensor x, y;
};

at::Tensor loss(const at::Tensor &out, const at::Tensor &y) { return (out - y).pow(2).mean(); }

std::vector<at::Tensor> after_step(accel::Model &m)
{
    std::vector<at::Tensor> out;
    for (const auto &p : m.parameters()) out.push_back(p.detach().clone());
    return out;
}

void sgd(const std::vector<at::Tensor> &params)
{
    at::NoGradGuard no_grad;
    for (auto p : params)
        if (p.grad().defined()) p.sub_(p.grad());
}

void expect_same(const std::vector<at::Tensor> &got, const std::vector<at::Tensor> &want, const std::string &what)
{
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-6)) << what << ": parameter " << i;
}

// One process: the whole batch, one SGD step (lr 1). Checks the step moved the adapters and nothing else.
std::vector<at::Tensor> reference(const Batch &b)
{
    auto m = make_model();
    const auto before = after_step(*m);
    loss(m->forward(b.x), b.y).backward();
    sgd(m->parameters());
    auto out = after_step(*m);
    size_t moved = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        const bool trains = m->parameters()[i].requires_grad();
        EXPECT_EQ(!at::equal(out[i], before[i]), trains) << m->named_parameters()[i].first;
        moved += trains;
    }
    EXPECT_EQ(moved, 6u);
    return out;
}

Batch batch()
{
    at::manual_seed(11);
    return {at::randn({8, 6}), at::randn({8, 3})};
}

TEST(LoraParallel, DdpTwoRanksEqualsOneProcess)
{
    const Batch b = batch();
    const auto want = reference(b);
    std::vector<std::shared_ptr<accel::Model>> models = {make_model(), make_model()};
    std::vector<std::vector<at::Tensor>> got(2);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        accel::Model &m = *models[static_cast<size_t>(r)];
        accel::config::DistributedDataParallelKwargs kwargs;
        accel::parallel::DistributedDataParallel ddp(m.named_parameters(), m.named_buffers(), comm, kwargs);
        loss(m.forward(b.x.narrow(0, 4 * r, 4)), b.y.narrow(0, 4 * r, 4)).backward();
        ddp.finish_backward();
        sgd(m.parameters());
        got[static_cast<size_t>(r)] = after_step(m);
    });
    expect_same(got[0], want, "ddp rank 0");
    expect_same(got[1], want, "ddp rank 1");
}

void sharded(const std::string &plugin)
{
    const Batch b = batch();
    const auto want = reference(b);
    auto cfg = accel::config::parse_accelerator_config(("{" + plugin + "}").c_str()).sharding;
    std::vector<std::shared_ptr<accel::Model>> models = {make_model(), make_model()};
    std::vector<std::vector<at::Tensor>> got(2);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        accel::Model &m = *models[static_cast<size_t>(r)];
        accel::parallel::ShardedDataParallel engine(m, comm, cfg);
        loss(accel::forward(m, b.x.narrow(0, 4 * r, 4), true), b.y.narrow(0, 4 * r, 4)).backward();
        engine.finish_backward();
        sgd(engine.optimizer_params());
        engine.after_optimizer_step();
        engine.summon_full_params(true);
        got[static_cast<size_t>(r)] = after_step(m);
        engine.summon_full_params(false);
    });
    expect_same(got[0], want, plugin + " rank 0");
    expect_same(got[1], want, plugin + " rank 1");
}

TEST(LoraParallel, FullShardAndZero3EqualOneProcess)
{
    sharded(R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 50})");
    sharded(R"("deepspeed_plugin": {"zero_stage": 3})");
}

} // namespace
