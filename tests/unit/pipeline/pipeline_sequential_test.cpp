// Pipeline parallelism of the JSON-spec models (a "sequential" layer list, issue 36) on 2 and 4 stages played by
// threads: the layers cut into stages by parameter count (or pp_split_points), each boundary's shape carried with
// its activation (float features of changing widths, token ids into an embedding, [rows, T, d_model] between
// transformer layers), against one process training the whole model on the same batches (fp32, 20 AdamW steps with
// accumulation and clipping) under GPipe, 1F1B, interleaved 1F1B and pp x dp, LoRA adapters included; forward
// through the stages equal to one process's on every rank; the whole model on every rank for checkpoints
// (WholeStages); and what a sequential pipeline refuses by name.
#include "catch_error.hpp"
#include "common/error.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/whole_gradients.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/script.h>

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace pp = accel::parallel::pp;

namespace {

constexpr int kSteps = 20, kAccum = 2;
constexpr int64_t kRows = 4;

// Float features [rows, 2, 3] flattened, then linear layers of changing widths (each boundary another shape).
const char *kMlp = R"({"type": "sequential", "layers": [{"type": "flatten"},
    {"type": "linear", "in_features": 6, "out_features": 16}, {"type": "gelu"},
    {"type": "linear", "in_features": 16, "out_features": 16}, {"type": "tanh"},
    {"type": "linear", "in_features": 16, "out_features": 12}, {"type": "gelu"},
    {"type": "linear", "in_features": 12, "out_features": 3}]})";

// Token ids [rows, 5] embedded, three batch-first transformer layers, a head over the vocabulary (causal LM loss).
const char *kBlocks = R"({"type": "sequential", "layers": [{"type": "embedding", "num_embeddings": 37, "embedding_dim": 16},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "batch_first": true},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "batch_first": true},
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0, "batch_first": true},
    {"type": "linear", "in_features": 16, "out_features": 37}]})";

struct Case {
    const char *json;
    accel::Loss loss;
    at::Tensor inputs, labels; // [steps, accum, rows, ...]
};

Case mlp_case()
{
    at::manual_seed(42);
    return {kMlp, accel::Loss(accel::LossKind::Mse), at::randn({kSteps, kAccum, kRows, 2, 3}), at::randn({kSteps, kAccum, kRows, 3})};
}

// The MLP with LoRA adapters on two of its linear layers (the base frozen): each adapter trains on its layer's stage.
Case mlp_lora_case()
{
    static const std::string json = std::string(kMlp).substr(0, std::string(kMlp).size() - 1) +
                                    R"(, "lora": {"r": 2, "lora_alpha": 4, "target_modules": ["1", "5"]}})";
    Case c = mlp_case();
    c.json = json.c_str();
    return c;
}

Case blocks_case()
{
    at::manual_seed(42);
    return {kBlocks, accel::Loss(accel::LossKind::CausalLm), at::randint(0, 37, {kSteps, kAccum, kRows, 5}, at::kLong),
            at::randint(0, 37, {kSteps, kAccum, kRows, 5}, at::kLong)};
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

bool near(const at::Tensor &got, const at::Tensor &want)
{
    return got.sizes() == want.sizes() && (got - want).abs().max().item<double>() <= 1e-5 * std::max(1.0, want.abs().max().item<double>());
}

// `stages` x `dp` thread ranks train `c` through the pipeline (2 micro-batches per replica's rows) as one process
// trains it whole: the losses (dp 1), the clipped norms and every parameter a stage holds within 1e-5; then the
// model's forward on every rank (through the stages) equals one process's, and each stage holds less than the whole.
void check_training(const Case &c, int32_t stages, const std::string &schedule, int32_t dp = 1,
                    const std::vector<int64_t> &split_points = {}, int32_t chunks = 1)
{
    SCOPED_TRACE(schedule + ", pp " + std::to_string(stages) + " x dp " + std::to_string(dp) + ", " + std::to_string(chunks) + " chunks");
    constexpr double kClip = 0.05;
    auto ref = make(c.json);
    auto ref_opt = adamw(ref->parameters());
    std::vector<double> ref_losses, ref_norms;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kAccum; ++k) {
            at::Tensor l = accel::compute_loss(c.loss, ref->forward(c.inputs[s][k]), c.labels[s][k]);
            ref_losses.push_back(l.item<double>());
            (l / static_cast<double>(kAccum)).backward();
        }
        ref_norms.push_back(accel::parallel::whole_clip_grad_norm(ref->parameters(), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }
    const at::Tensor probe = c.inputs[0][0];
    const at::Tensor want = ref->forward(probe).detach();
    int64_t whole = 0;
    for (const auto &t : ref->parameters()) whole += t.numel();

    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r < stages * dp; ++r) models.push_back(make(c.json));
    dist::run_on_threads(stages * dp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(dp, 1, 1, 1, stages), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const int64_t rows = kRows / dp, first_row = mesh.rank_in(dist::MeshDim::Dp) * rows;
        accel::config::ParallelismConfig config;
        config.pp_size = stages;
        config.pp_schedule = schedule;
        config.num_micro_batches = 2;
        config.pp_split_points = split_points;
        if (chunks > 1) config.num_virtual_stages_per_pipeline_rank = chunks;
        auto opt = adamw(m.parameters()); // taken before the cut, as a user's optimizer may take them
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        int64_t held = 0;
        for (const auto &t : m.parameters()) held += t.numel();
        EXPECT_LT(held, whole) << "stage " << pipeline->stage();
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kAccum; ++k) {
                pipeline->set_require_sync(k == kAccum - 1);
                const double got = pipeline->run(
                    c.inputs[s][k].narrow(0, first_row, rows), c.labels[s][k].narrow(0, first_row, rows),
                    [&](const at::Tensor &out, const at::Tensor &y) { return accel::compute_loss(c.loss, out, y); },
                    [](const at::Tensor &l) { return l / static_cast<double>(kAccum); });
                const double ref_loss = ref_losses[static_cast<size_t>(s * kAccum + k)];
                if (dp == 1) {
                    EXPECT_NEAR(got, ref_loss, 1e-5 * ref_loss) << "step " << s << " rank " << comm->rank();
                }
            }
            const double norm = pipeline->clip_grad_norm(kClip, 2.0, true);
            EXPECT_NEAR(norm, ref_norms[static_cast<size_t>(s)], 1e-5 * ref_norms[static_cast<size_t>(s)]) << "step " << s;
            opt.step();
            opt.zero_grad();
        }
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            if (p.numel() == 0) continue; // another stage's
            EXPECT_TRUE(near(p, ref->named_parameters()[i].second)) << name << " (stage " << pipeline->stage() << ")";
        }
        // Inference through the stages (the prepare_pippy equivalent): one process's output on every rank.
        const at::Tensor out = m.forward(probe);
        EXPECT_TRUE(near(out, want)) << "forward on rank " << comm->rank() << ": " << out.sizes() << " vs " << want.sizes();
        // An input refused on every rank alike (none sent, no stage left waiting).
        EXPECT_EQ(catch_error([&] { m.forward(at::empty({0, 6})); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
        { // checkpoints and save_model: while WholeStages lives every rank holds one process's whole model
            const pp::WholeStages whole_model(pipeline.get());
            for (size_t i = 0; i < m.named_parameters().size(); ++i)
                EXPECT_TRUE(near(m.named_parameters()[i].second, ref->named_parameters()[i].second))
                    << m.named_parameters()[i].first << " whole on rank " << comm->rank();
        }
        int64_t after = 0;
        for (const auto &t : m.parameters()) after += t.numel();
        EXPECT_EQ(after, held) << "the stage again";
    });
}

TEST(PipelineSequential, MlpEqualsOneProcess)
{
    const Case c = mlp_case();
    check_training(c, 2, "gpipe");
    check_training(c, 2, "1f1b");
    check_training(c, 4, "1f1b");
    check_training(c, 4, "gpipe", 1, {2, 4, 6}); // explicit split points: a stage of gelu + linear
    check_training(c, 2, "1f1b", 2);             // pp 2 x dp 2
    check_training(c, 2, "interleaved_1f1b", 1, {}, 2);
    check_training(mlp_lora_case(), 2, "1f1b");
}

TEST(PipelineSequential, TransformerBlocksEqualOneProcess)
{
    const Case c = blocks_case();
    check_training(c, 2, "gpipe");
    check_training(c, 2, "1f1b");
    check_training(c, 4, "1f1b", 1, {1, 2, 4}); // the embedding alone, two blocks, a block + the head
    check_training(c, 2, "gpipe", 2);           // pp 2 x dp 2
}

// Refused by name on every rank before the model changes: what micro-batches cannot split as one process's batch
// (batch_norm, sequence-first transformer layers), pp x cp (a sequential model has no context-parallel plan; pp x tp
// and pp x sharding are built: pipeline_spec_mesh_test.cpp), and TorchScript (no layer list to cut).
TEST(PipelineSequential, RefusedByName)
{
    auto refusal = [](const std::string &json, int32_t cp, const std::string &want) {
        SCOPED_TRACE(json);
        dist::run_on_threads(2 * cp, [&](const std::shared_ptr<dist::Communicator> &comm) {
            dist::DeviceMesh mesh(dist::mesh_shape(1, 1, cp, 1, 2), comm);
            auto m = accel::make_model_from_json(json.c_str());
            const size_t before = m->named_parameters().front().second.numel();
            accel::config::ParallelismConfig config;
            config.pp_size = 2;
            config.cp_size = cp;
            const accel::Error e = catch_error([&] { pp::prepare_pipeline(*m, mesh, config); });
            EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED);
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("pp_size"), std::string::npos) << e.what();
            EXPECT_EQ(m->named_parameters().front().second.numel(), before); // left whole
        });
    };
    refusal(R"({"type": "sequential", "layers": [{"type": "linear", "in_features": 4, "out_features": 4},
        {"type": "batch_norm", "num_features": 4}, {"type": "linear", "in_features": 4, "out_features": 2}]})",
            1, "layers[1] batch_norm");
    refusal(R"({"type": "sequential", "layers": [{"type": "linear", "in_features": 4, "out_features": 8},
        {"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2}, {"type": "linear", "in_features": 8, "out_features": 2}]})",
            1, "layers[1] transformer_encoder_layer without batch_first");
    refusal(kMlp, 2, "with cp_size / sp_size: a sequential model has no context-parallel plan");

    char path[] = "/tmp/accel_pp_script_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    torch::jit::Module scripted("m");
    scripted.register_parameter("w", at::ones({2, 2}), false);
    scripted.define("def forward(self, x):\n    return x.mm(self.w)\n");
    scripted.save(path);
    auto script = accel::load_torchscript_model(path);
    std::remove(path);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, 2), comm);
        accel::config::ParallelismConfig config;
        config.pp_size = 2;
        const accel::Error e = catch_error([&] { pp::prepare_pipeline(*script, mesh, config); });
        EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED);
        EXPECT_NE(std::string(e.what()).find("parallelism_config.pp_size 2: a TorchScript model"), std::string::npos) << e.what();
    });
}

} // namespace
