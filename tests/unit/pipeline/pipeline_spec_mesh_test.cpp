// JSON-spec (sequential) models' pipeline stages composed with tensor parallelism and the sharding engine (issue
// 36), played by threads: pp x tp (the spec's tp_plan: colwise .. rowwise linear regions, "auto" transformer blocks,
// sequence parallelism), pp x dp_shard (FSDP, ZeRO 1-3), HSDP, and pp x tp x dp_shard. The cuts are placed where a
// boundary is split over tp: inside a colwise .. rowwise region (each tp rank sends its columns to the same tp rank
// of the next stage; the boundary's shape header says this rank's width) and inside a sequence-parallel run of
// blocks (each rank's positions). Each layout trains 20 AdamW steps with accumulation and clipping as one process
// trains the whole model on the same global batch: losses (averaged over the data-parallel ranks), clipped norms and
// every rank's tp slices of its stage's final weights within 1e-5 relative.
#include "config/accelerator_config.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/whole_gradients.hpp"
#include "tp_slices_check.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace pp = accel::parallel::pp;
namespace tp = accel::parallel::tp;

namespace {

constexpr int kSteps = 20, kAccum = 2;
constexpr int64_t kRows = 4;

// Float features [rows, 2, 3] flattened, two colwise .. rowwise regions (layers 1-3 and 5-7), a replicated head.
const char *kMlp = R"({"type": "sequential", "layers": [{"type": "flatten"},
    {"type": "linear", "in_features": 6, "out_features": 16, "tp_plan": "colwise"}, {"type": "gelu"},
    {"type": "linear", "in_features": 16, "out_features": 16, "tp_plan": "rowwise"}, {"type": "tanh"},
    {"type": "linear", "in_features": 16, "out_features": 12, "tp_plan": "colwise"}, {"type": "gelu"},
    {"type": "linear", "in_features": 12, "out_features": 8, "tp_plan": "rowwise"}, {"type": "tanh"},
    {"type": "linear", "in_features": 8, "out_features": 3}]})";

// Token ids [rows, 6] embedded, three batch-first transformer layers split by heads, a head over the vocabulary.
const char *kBlocks = R"({"type": "sequential", "layers": [{"type": "embedding", "num_embeddings": 37, "embedding_dim": 16},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "batch_first": true, "tp_plan": "auto"},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "batch_first": true, "tp_plan": "auto"},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "batch_first": true, "tp_plan": "auto"},
    {"type": "linear", "in_features": 16, "out_features": 37}]})";

// The MLP with LoRA adapters on its two colwise layers (the base frozen: under sharding the frozen flats of a stage's
// units, the other stage's empty).
const std::string &mlp_lora()
{
    static const std::string json = std::string(kMlp).substr(0, std::string(kMlp).size() - 1) +
                                    R"(, "lora": {"r": 2, "lora_alpha": 4, "target_modules": ["1", "5"]}})";
    return json;
}

struct Layout {
    const char *json = kMlp;
    std::string schedule = "1f1b", plugin; // plugin: the accelerator config's sharding plugin ("" none)
    int32_t pp = 2, tp = 1, shard = 1, replicas = 1, micro = 2;
    bool sequence_parallel = false;
    std::vector<int64_t> split_points;
    std::string describe() const
    {
        return schedule + ", pp " + std::to_string(pp) + " x tp " + std::to_string(tp) + " x dp_replicate " +
               std::to_string(replicas) + " x dp_shard " + std::to_string(shard) + (sequence_parallel ? " (sp)" : "") +
               ", " + (plugin.empty() ? "no sharding" : plugin);
    }
};

struct Data {
    accel::Loss loss;
    at::Tensor inputs, labels; // [steps, accum, rows, ...]
};

Data data_for(const char *json)
{
    at::manual_seed(42);
    if (std::string(json).find("flatten") != std::string::npos) // the MLP, with or without LoRA
        return {accel::Loss(accel::LossKind::Mse), at::randn({kSteps, kAccum, kRows, 2, 3}), at::randn({kSteps, kAccum, kRows, 3})};
    return {accel::Loss(accel::LossKind::CausalLm), at::randint(0, 37, {kSteps, kAccum, kRows, 6}, at::kLong),
            at::randint(0, 37, {kSteps, kAccum, kRows, 6}, at::kLong)};
}

torch::optim::AdamW adamw(const std::vector<at::Tensor> &params)
{
    return torch::optim::AdamW(params, torch::optim::AdamWOptions(3e-3).weight_decay(0.01).eps(1e-6));
}

std::shared_ptr<accel::Model> make(const char *json)
{
    at::manual_seed(41); // every rank starts from one process's weights
    auto m = accel::make_model_from_json(json);
    m->train(false);
    return m;
}

using accel_test::check_weights;

void check_training(const Layout &l)
{
    SCOPED_TRACE(l.describe());
    const Data d = data_for(l.json);
    const accel::config::ShardingConfig sharding =
        accel::config::parse_accelerator_config(("{" + l.plugin + "}").c_str()).sharding;
    const int32_t dp = l.replicas * l.shard, world = l.pp * l.tp * dp;
    constexpr double kClip = 0.05;

    auto ref = make(l.json);
    auto ref_opt = adamw(ref->parameters());
    std::vector<double> losses, norms;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kAccum; ++k) {
            at::Tensor loss = accel::compute_loss(d.loss, ref->forward(d.inputs[s][k]), d.labels[s][k]);
            losses.push_back(loss.item<double>());
            (loss / static_cast<double>(kAccum)).backward();
        }
        norms.push_back(accel::parallel::whole_clip_grad_norm(ref->parameters(), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }

    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r < world; ++r) models.push_back(make(l.json));
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(l.replicas, l.shard, 1, l.tp, l.pp), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const int64_t rows = kRows / dp, first_row = mesh.rank_in(dist::MeshDim::Dp) * rows; // this rank's share
        accel::config::ParallelismConfig config;
        config.pp_size = l.pp;
        config.tp_size = l.tp;
        config.dp_replicate_size = l.replicas;
        config.dp_shard_size = l.shard;
        config.pp_schedule = l.schedule;
        config.num_micro_batches = l.micro;
        config.pp_split_points = l.split_points;
        config.sequence_parallel = l.sequence_parallel;
        auto pipeline = pp::prepare_pipeline(m, mesh, config, nullptr, &sharding);
        accel::parallel::ShardedDataParallel *engine = pipeline->sharded();
        ASSERT_EQ(engine != nullptr, !l.plugin.empty());
        auto opt = adamw(engine ? engine->optimizer_params() : m.parameters());
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kAccum; ++k) {
                pipeline->set_require_sync(k == kAccum - 1);
                const double got = pipeline->run(
                    d.inputs[s][k].narrow(0, first_row, rows), d.labels[s][k].narrow(0, first_row, rows),
                    [&](const at::Tensor &out, const at::Tensor &y) { return accel::compute_loss(d.loss, out, y); },
                    [](const at::Tensor &x) { return x / static_cast<double>(kAccum); });
                // Each data-parallel rank reports its rows' loss (as many elements each): their mean is the batch's.
                at::Tensor mean = at::full({1}, got, at::kDouble);
                mesh.group(dist::MeshDim::Dp)->allreduce(mean, dist::ReduceOp::Sum);
                const double expected = losses[static_cast<size_t>(s * kAccum + k)];
                EXPECT_NEAR(mean.item<double>() / dp, expected, 1e-5 * expected) << "step " << s << " rank " << comm->rank();
            }
            const double norm = pipeline->clip_grad_norm(kClip, 2.0, true);
            const double expected = norms[static_cast<size_t>(s)];
            EXPECT_NEAR(norm, expected, 1e-5 * expected) << "step " << s << " rank " << comm->rank();
            opt.step();
            if (engine) {
                engine->after_optimizer_step(); // the shards' gradients are views of the engine's buffers
                engine->zero_grad();
            } else {
                opt.zero_grad();
            }
        }
        if (engine) engine->summon_full_params(true);
        check_weights(m, *ref, mesh, l.tp, comm->rank());
        if (engine) engine->summon_full_params(false);
    });
}

// pp 2 x tp 2 without sharding: the MLP cut inside its first colwise .. rowwise region (stage 0 ends with the
// colwise layer: each tp rank sends its 8 columns), under 1F1B and GPipe; the transformer blocks cut between two
// split blocks, with sequence parallelism (each rank's 3 of the 6 positions cross the boundary) under 1F1B.
TEST(PipelineSpecMesh, TensorParallelEqualsOneProcess)
{
    Layout l;
    l.tp = 2;
    l.split_points = {2};
    check_training(l);
    l.schedule = "gpipe";
    l.split_points = {6}; // inside the second region (after its gelu)
    check_training(l);
    l.json = kBlocks;
    l.schedule = "1f1b";
    l.split_points = {2};
    l.sequence_parallel = true;
    check_training(l);
}

// pp 2 x dp_shard 2: the engine's per-layer units over a cut layer list (the other stage's layers hold nothing),
// FSDP FULL_SHARD and SHARD_GRAD_OP, ZeRO 1, 2 and 3; HSDP (pp 2 x dp_replicate 2 x dp_shard 2 under FULL_SHARD, one
// row each); LoRA adapters under FULL_SHARD (the frozen base sharded per unit).
TEST(PipelineSpecMesh, ShardingEqualsOneProcess)
{
    Layout l;
    l.shard = 2;
    l.micro = 1;
    for (const char *plugin : {R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD"})",
                               R"("fsdp_plugin": {"sharding_strategy": "SHARD_GRAD_OP"})",
                               R"("deepspeed_plugin": {"zero_stage": 1})", R"("deepspeed_plugin": {"zero_stage": 2})",
                               R"("deepspeed_plugin": {"zero_stage": 3})"}) {
        l.plugin = plugin;
        check_training(l);
    }
    l.json = kBlocks;
    l.schedule = "gpipe";
    l.micro = 2;
    l.plugin = R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", )"
               R"("transformer_cls_names_to_wrap": ["transformer_encoder_layer"]})";
    check_training(l);
    l.json = kMlp;
    l.replicas = 2;
    l.micro = 1;
    l.plugin = R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD"})"; // replicated by the mesh's dp_replicate
    check_training(l);
    l.json = mlp_lora().c_str();
    l.replicas = 1;
    check_training(l);
}

// pp 2 x tp 2 x dp_shard 2 (8 ranks): each rank's tp slices sharded over its stage's dp group, the boundaries split;
// the MLP also with LoRA adapters on its split colwise layers.
TEST(PipelineSpecMesh, TensorParallelTimesShardsEqualsOneProcess)
{
    Layout l;
    l.tp = 2;
    l.shard = 2;
    l.micro = 1;
    l.split_points = {2};
    l.plugin = R"("deepspeed_plugin": {"zero_stage": 3})";
    check_training(l);
    l.json = mlp_lora().c_str(); // LoRA on the split colwise layers, the frozen base sharded
    check_training(l);
    l.json = kBlocks;
    l.sequence_parallel = true;
    l.plugin = R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD"})";
    check_training(l);
}

} // namespace
