// Sharding with a bfloat16 mixed_precision_policy against a hand-written LibTorch loop of what the policy
// means: before each forward the parameters are bfloat16 copies of float32 masters, the input is cast to
// bfloat16 and the output back to float32; the gradients (bfloat16) are reduced in reduce_dtype and the
// optimizer steps the float32 masters. In one process every strategy gives the reference's masters bit for
// bit. The multi-process runs (tests/distributed) check the 16-bit collectives against DDP.
#include "accelerator/accelerator.hpp"
#include "state/accelerator_state.hpp"
#include "config/accelerator_config.hpp"
#include "config/optimizer_config.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "precision/autocast.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace {

constexpr const char *kMlp = "{\"type\": \"mlp\", \"widths\": [6, 16, 16, 3]}";

std::shared_ptr<accel::Model> make_model(uint64_t seed)
{
    at::manual_seed(seed);
    return accel::make_model_from_json(kMlp);
}

void copy_weights(const accel::Model &from, accel::Model &to)
{
    accel::NamedTensors entries = from.named_parameters();
    to.load_state_dict(entries, true);
}

struct Reference {
    std::shared_ptr<accel::Model> master; // float32, stepped by the optimizer
    std::shared_ptr<accel::Model> low;    // bfloat16 copies, computed with
    std::shared_ptr<accel::AcceleratedOptimizer> optimizer;
    at::ScalarType reduce_dtype;

    // One step of the policy by hand (one process: the reduction is a cast to reduce_dtype and back).
    void step(const at::Tensor &x, const at::Tensor &y)
    {
        {
            at::NoGradGuard no_grad;
            auto mp = master->parameters(), lp = low->parameters();
            for (size_t i = 0; i < mp.size(); ++i) lp[i].set_data(mp[i].detach().to(at::kBFloat16));
        }
        at::Tensor out = low->forward(x.to(at::kBFloat16)).to(at::kFloat);
        accel::compute_loss(accel::LossKind::Mse, out, y).backward();
        auto mp = master->parameters(), lp = low->parameters();
        for (size_t i = 0; i < mp.size(); ++i) {
            mp[i].mutable_grad() = lp[i].grad().to(reduce_dtype).to(at::kFloat);
            lp[i].mutable_grad().reset();
        }
        optimizer->step();
        optimizer->zero_grad();
    }
};

struct Run {
    std::unique_ptr<accel::Accelerator> acc;
    std::shared_ptr<accel::Model> model;
    std::shared_ptr<accel::AcceleratedOptimizer> optimizer;

    void step(const at::Tensor &x, const at::Tensor &y)
    {
        at::Tensor out = accel::forward(*model, x, true);
        EXPECT_EQ(out.scalar_type(), at::kFloat); // outputs come back as float32
        acc->backward(accel::compute_loss(accel::LossKind::Mse, out, y));
        optimizer->step();
        optimizer->zero_grad();
    }
};

void expect_masters_equal(Run &run, Reference &ref, const std::string &what)
{
    run.acc->summon_full_params(*run.model, true);
    auto got = run.model->parameters(), want = ref.master->parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].scalar_type(), at::kFloat) << what << ": summoned parameters are the float32 masters";
        EXPECT_TRUE(at::equal(got[i], want[i])) << what << ": " << run.model->named_parameters()[i].first << " differs by "
                                                << (got[i] - want[i]).abs().max().item<double>();
    }
    run.acc->summon_full_params(*run.model, false);
}

void train_and_compare(const std::string &plugin, const std::string &optimizer, at::ScalarType reduce_dtype)
{
    SCOPED_TRACE(plugin + " " + optimizer);
    auto base = make_model(3);
    Run run;
    run.acc = std::make_unique<accel::Accelerator>(("{" + plugin + "}").c_str());
    run.model = make_model(11);
    copy_weights(*base, *run.model);
    run.optimizer = std::make_shared<accel::AcceleratedOptimizer>(run.model, accel::config::parse_optimizer_config(optimizer.c_str()));
    run.acc->prepare_model(run.model);
    run.acc->prepare_optimizer(run.optimizer);

    Reference ref;
    ref.master = make_model(12);
    ref.low = make_model(13);
    copy_weights(*base, *ref.master);
    ref.optimizer = std::make_shared<accel::AcceleratedOptimizer>(ref.master, accel::config::parse_optimizer_config(optimizer.c_str()));
    ref.reduce_dtype = reduce_dtype;

    // Outside a forward, the model's parameters are the 16-bit copies (or freed shards).
    at::manual_seed(5);
    for (int s = 0; s < 6; ++s) {
        at::Tensor x = at::randn({5, 6}), y = at::randn({5, 3});
        run.step(x, y);
        ref.step(x, y);
        expect_masters_equal(run, ref, "after step " + std::to_string(s + 1));
    }
    // free_memory gives the model its float32 parameters (the masters) back.
    run.acc->free_memory();
    auto got = run.model->parameters(), want = ref.master->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].scalar_type(), at::kFloat);
        EXPECT_TRUE(at::equal(got[i], want[i])) << "after free_memory: " << run.model->named_parameters()[i].first;
    }
}

} // namespace

TEST(ShardedMixedPrecision, FullShardEqualsTheHandWrittenPolicyBitwise)
{
    train_and_compare("\"fsdp_plugin\": {\"mixed_precision_policy\": {\"param_dtype\": \"bf16\", \"reduce_dtype\": "
                      "\"bf16\", \"buffer_dtype\": \"bf16\"}}",
                      "{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.01}", at::kBFloat16);
}

TEST(ShardedMixedPrecision, EveryStrategyAndReduceDtype)
{
    for (const char *strategy : {"SHARD_GRAD_OP", "NO_SHARD"})
        train_and_compare(std::string("\"fsdp_plugin\": {\"sharding_strategy\": \"") + strategy +
                              "\", \"mixed_precision_policy\": {\"param_dtype\": \"bfloat16\", \"reduce_dtype\": \"float32\"}}",
                          "{\"type\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.9}", at::kFloat);
    // DeepSpeed with mixed_precision "bf16" (ZeRO-1 and ZeRO-2): bfloat16 weights over float32 master
    // partitions, bfloat16 reductions. Autocast is on too; every operation is already bfloat16.
    for (int stage : {1, 2})
        train_and_compare("\"mixed_precision\": \"bf16\", \"deepspeed_plugin\": {\"zero_stage\": " + std::to_string(stage) + "}",
                          "{\"type\": \"adamw\", \"lr\": 0.01}", at::kBFloat16);
}

TEST(ShardedMixedPrecision, TheBf16PolicyIsAccelerateDefaultAndRealInMemory)
{
    // mixed_precision "bf16" without a policy: bfloat16 parameters, reductions and buffers (Accelerate's
    // set_mixed_precision); the effective config says so.
    accel::Accelerator acc("{\"mixed_precision\": \"bf16\", \"fsdp_plugin\": {}}");
    const std::string cfg = accel::config::to_json(acc.state()->config);
    EXPECT_NE(cfg.find("\"mixed_precision_policy\":{\"param_dtype\":\"bfloat16\",\"reduce_dtype\":\"bfloat16\","
                       "\"buffer_dtype\":\"bfloat16\"}"),
              std::string::npos)
        << cfg;
    auto model = make_model(1);
    int64_t numel = 0;
    for (const auto &p : model->parameters()) numel += p.numel();
    acc.prepare_model(model);
    for (const auto &p : model->parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16);
    acc.backward(accel::compute_loss(accel::LossKind::Mse, accel::forward(*model, at::randn({2, 6}), true), at::randn({2, 3})));
    const std::string mem = acc.memory_stats_json();
    // One process: the float32 master shard is every element (4 bytes each); the gathered copy was 16-bit.
    EXPECT_NE(mem.find("\"parameter_bytes\": " + std::to_string(4 * numel)), std::string::npos) << mem;
    EXPECT_NE(mem.find("\"peak_gathered_bytes\": " + std::to_string(2 * numel)), std::string::npos) << mem;
}

// Summoned, a 16-bit policy's parameters are their float32 masters: a floating-point input stays float32 to meet
// them (it was cast to bfloat16 and the forward failed; a later pipeline stage's generation summons so), and the
// output is the float32 model's.
TEST(ShardedMixedPrecision, ASummonedModelComputesWithItsFloat32Masters)
{
    accel::Accelerator acc("{\"mixed_precision\": \"bf16\", \"fsdp_plugin\": {}}");
    auto model = make_model(1), whole = make_model(2);
    copy_weights(*model, *whole);
    acc.prepare_model(model);
    const at::Tensor x = at::randn({2, 6});
    acc.summon_full_params(*model, true);
    at::NoGradGuard no_grad;
    const at::Tensor out = accel::forward(*model, x, false);
    EXPECT_EQ(out.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose(out, whole->forward(x), 1e-6, 1e-6));
    acc.summon_full_params(*model, false);
}

// The wrap policies see one type per layer of the spec (a merge once listed every type twice, so that
// TRANSFORMER_BASED_WRAP on "linear" left the middle layer of an MLP in the root unit).
TEST(ShardedMixedPrecision, LayerTypesAreOnePerLayer)
{
    auto model = make_model(1);
    EXPECT_EQ(model->layer_types(), (std::vector<std::string>{"linear", "relu", "linear", "relu", "linear"}));
    EXPECT_EQ(model->parameter_layers(), (std::vector<size_t>{0, 0, 2, 2, 4, 4}));
    accel::Accelerator acc("{\"fsdp_plugin\": {\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\", "
                           "\"transformer_cls_names_to_wrap\": [\"linear\"]}}");
    acc.prepare_model(model);
    EXPECT_NE(acc.memory_stats_json().find("\"num_units\": 3"), std::string::npos) << acc.memory_stats_json();
}

// buffer_dtype: floating-point buffers (batch norm's running statistics) are kept in bfloat16 while training, and
// are float32 again where they are read or saved: summoned (checkpoints) and after free_memory. The integer
// counter keeps its dtype.
TEST(ShardedMixedPrecision, BuffersTakeBufferDtypeAndComeBackForCheckpoints)
{
    at::manual_seed(2);
    auto model = accel::make_model_from_json("{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", \"in_features\": 6, \"out_features\": 4}, "
                                             "{\"type\": \"batch_norm\", \"num_features\": 4}]}");
    auto buffer = [&](const char *name) { return *model->find_tensor(name); };
    auto acc = std::make_unique<accel::Accelerator>("{\"mixed_precision\": \"bf16\", \"fsdp_plugin\": {}}");
    acc->prepare_model(model);
    EXPECT_EQ(buffer("1.running_mean").scalar_type(), at::kBFloat16);
    EXPECT_EQ(buffer("1.num_batches_tracked").scalar_type(), at::kLong);
    acc->backward(accel::compute_loss(accel::LossKind::Mse, accel::forward(*model, at::randn({5, 6}), true), at::randn({5, 4})));
    EXPECT_EQ(buffer("1.num_batches_tracked").item<int64_t>(), 1);
    const at::Tensor mean16 = buffer("1.running_mean").clone();
    EXPECT_GT(mean16.abs().sum().item<double>(), 0.0); // updated by the forward
    acc->summon_full_params(*model, true);
    EXPECT_EQ(buffer("1.running_mean").scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(buffer("1.running_mean"), mean16.to(at::kFloat)));
    acc->summon_full_params(*model, false);
    EXPECT_EQ(buffer("1.running_var").scalar_type(), at::kBFloat16);
    acc->free_memory();
    EXPECT_EQ(buffer("1.running_var").scalar_type(), at::kFloat);
    EXPECT_EQ(model->parameters()[0].scalar_type(), at::kFloat);
}
