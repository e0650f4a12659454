// Pipeline parallelism composed with tensor parallelism (pp x tp, issue 36), played by threads: each stage of a
// gpt split over its tp group (Megatron's layout, tp innermost), the hidden states going between the same tp rank
// of neighbouring stages. GPipe, 1F1B and interleaved 1F1B on pp 2 x tp 2, with sequence parallelism, and with
// two data-parallel replicas (pp 2 x tp 2 x dp 2), train 20 AdamW steps with accumulation and clipping as one
// process trains the whole model: the losses every rank reports, the clipped norms and each rank's slices of
// the final weights within 1e-5 relative. The whole model's forward through the stages (prepare_pippy's) gives
// every rank its vocabulary columns of one process's logits.
// Pipeline parallelism composed with context parallelism (pp x cp, pp x sp) the same way: each stage's attention
// over its cp group (ring and all-gather strategies, Ulysses), each cp rank of a stage sending its part of the
// sequence to the same cp rank of the next, the batch split as the prepared loader splits it (padded when its
// length is not a multiple of 2 x cp), gradients averaged over the stage's dp_cp group; also with tp and dp.
#include "catch_error.hpp"
#include "config/generation_config.hpp"
#include "config/parallelism_config.hpp"
#include "data_loader/dataset.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/generation.hpp"
#include "model/gpt_model.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/context_parallel/plan.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/whole_gradients.hpp"
#include "pipeline_models.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace cp = accel::parallel::cp;
namespace pp = accel::parallel::pp;
namespace tp = accel::parallel::tp;

namespace {

constexpr int kSteps = 20, kAccum = 2, kRows = 4, kSeq = 8, kVocab = 37;

std::string gpt_json(int64_t layers, bool tied)
{
    return std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": )") +
           std::to_string(layers) + ", \"tie_word_embeddings\": " + (tied ? "true" : "false") + "}";
}

struct Layout {
    std::string schedule = "gpipe";
    int32_t pp = 2, tp = 2, dp = 1;
    int32_t cp = 1;                     // > 1: context parallelism over that many ranks of each stage
    std::string cp_strategy = "alltoall"; // or "allgather", or "ulysses" (sp_size)
    int64_t seq = kSeq;                 // the batch's sequence length (padded to a multiple of 2 x cp)
    int64_t layers = 4, micro = 2;
    int32_t chunks = 1; // > 1: interleaved, that many chunks per stage
    bool tied = true, sequence_parallel = false;
    std::string json; // the model's spec (a llama's); empty: gpt_json(layers, tied)
    std::string describe() const
    {
        return schedule + ", pp " + std::to_string(pp) + " x tp " + std::to_string(tp) + " x dp " + std::to_string(dp) +
               " x cp " + std::to_string(cp) + " (" + cp_strategy + ", T " + std::to_string(seq) + ")" +
               (sequence_parallel ? " (sequence parallel)" : "") + ", " + std::to_string(layers) + " layers, " +
               (tied ? "tied" : "untied") + ", " + std::to_string(micro) + " micro-batches of " + std::to_string(chunks) + " chunks";
    }
};

// eps 1e-6 as in the pipeline's own test: the key bias's gradient is rounding noise, which the default eps would
// turn into full-size steps of opposite signs on the two sides.
torch::optim::AdamW adamw(const std::vector<at::Tensor> &params)
{
    return torch::optim::AdamW(params, torch::optim::AdamWOptions(3e-3).weight_decay(0.01).eps(1e-6));
}

void check_training(const Layout &l)
{
    SCOPED_TRACE(l.describe() + " " + l.json);
    const std::string json = l.json.empty() ? gpt_json(l.layers, l.tied) : l.json;
    const int32_t world = l.pp * l.tp * l.dp * l.cp;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= world; ++r) { // the same seed: every rank starts from one process's weights
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json.c_str()));
        models.back()->train(false); // no dropout
    }
    constexpr double kClip = 0.05;
    at::manual_seed(42);
    at::Tensor ids = at::randint(0, kVocab, {kSteps, kAccum, kRows, l.seq}, at::kLong);
    at::Tensor labels = at::randint(0, kVocab, {kSteps, kAccum, kRows, l.seq}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);

    auto &ref = *models.back();
    auto ref_opt = adamw(ref.parameters());
    std::vector<double> ref_norms, ref_losses;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kAccum; ++k) {
            at::Tensor loss = accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]);
            ref_losses.push_back(loss.item<double>());
            (loss / static_cast<double>(kAccum)).backward();
        }
        ref_norms.push_back(accel::parallel::whole_clip_grad_norm(ref.parameters(), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }
    at::Tensor probe = ids[0][0];
    at::Tensor ref_logits;
    {
        at::NoGradGuard no_grad;
        ref_logits = ref.forward(probe);
    }

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(l.dp, 1, l.cp, l.tp, l.pp), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const int64_t rows = kRows / l.dp, first_row = mesh.rank_in(dist::MeshDim::Dp) * rows; // this replica's share
        accel::config::ParallelismConfig config;
        config.pp_size = l.pp;
        config.tp_size = l.tp;
        config.dp_replicate_size = l.dp;
        config.pp_schedule = l.schedule;
        config.num_micro_batches = static_cast<int32_t>(l.micro);
        config.sequence_parallel = l.sequence_parallel;
        if (l.chunks > 1) config.num_virtual_stages_per_pipeline_rank = l.chunks;
        auto opt = adamw(m.parameters()); // made before prepare, as a user's optimizer may be
        if (l.cp > 1) cp::prepare_context_parallel(m, mesh, l.cp_strategy); // before the pipeline, as prepare does
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        // This rank's rows of a batch, and under cp its part of their sequence (what the prepared loader yields).
        auto mine = [&](const at::Tensor &inputs, const at::Tensor &targets) {
            accel::Batch b;
            b.inputs = inputs.narrow(0, first_row, rows);
            b.labels = targets.narrow(0, first_row, rows);
            cp::split_batch(b, mesh);
            return b;
        };
        const accel::Loss loss(accel::LossKind::CausalLm);
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kAccum; ++k) {
                pipeline->set_require_sync(k == kAccum - 1);
                const accel::Batch b = mine(ids[s][k], labels[s][k]);
                const double got = pipeline->run(
                    b.inputs, b.labels,
                    [&](const at::Tensor &out, const at::Tensor &y) { return accel::compute_loss(loss, out, y); },
                    [](const at::Tensor &x) { return x / static_cast<double>(kAccum); });
                const double want = ref_losses[static_cast<size_t>(s * kAccum + k)];
                if (l.dp == 1) {
                    EXPECT_NEAR(got, want, 1e-5 * want) << "step " << s << " rank " << comm->rank();
                }
            }
            const double norm = pipeline->clip_grad_norm(kClip, 2.0, true);
            EXPECT_NEAR(norm, ref_norms[static_cast<size_t>(s)], 1e-5 * ref_norms[static_cast<size_t>(s)])
                << "step " << s << " rank " << comm->rank();
            opt.step();
            opt.zero_grad();
        }
        // Each rank holds its tp slices of its stage's parameters: one process's final weights, sliced.
        const auto &plan = dynamic_cast<tp::TensorParallelModel &>(m).tensor_parallel_slicing();
        const int32_t t = mesh.rank_in(dist::MeshDim::Tp);
        int64_t held = 0;
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            if (p.numel() == 0) continue; // another stage's
            ++held;
            const at::Tensor &whole = ref.named_parameters()[i].second;
            const auto it = plan.find(name);
            const at::Tensor want = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, t, l.tp);
            ASSERT_EQ(p.sizes(), want.sizes()) << name << " (rank " << comm->rank() << ")";
            const double diff = (p - want).abs().max().item<double>();
            EXPECT_LE(diff, 1e-5 * std::max(1.0, whole.abs().max().item<double>()))
                << name << " after training (rank " << comm->rank() << ")";
        }
        EXPECT_GT(held, 0);
        EXPECT_EQ(plan.empty(), l.tp == 1);
        // The whole model's forward through the stages: on every rank its vocabulary columns of the logits,
        // marked so that the loss takes the vocabulary-parallel cross-entropy; under cp those of its part of the
        // sequence, marked so that the loss is the whole sequence's.
        if (l.dp == 1) {
            at::NoGradGuard no_grad;
            accel::Batch b; // split as the loader would
            b.inputs = probe;
            b.labels = labels[0][0];
            cp::split_batch(b, mesh);
            const at::Tensor logits = m.forward(b.inputs);
            const int64_t columns = logits.size(-1), start = t * columns;
            const int64_t valid = std::min<int64_t>(columns, kVocab - start);
            if (l.seq % (2 * l.cp) == 0) { // no padding: this rank's positions of one process's logits
                const at::Tensor want = cp::shard_sequence(ref_logits, 1, mesh.rank_in(dist::MeshDim::Cp), l.cp);
                const double diff = (logits.narrow(-1, 0, valid) - want.narrow(-1, start, valid)).abs().max().item<double>();
                EXPECT_LE(diff, 1e-5 * std::max(1.0, ref_logits.abs().max().item<double>())) << "logits, rank " << comm->rank();
            }
            const double got = accel::compute_loss(loss, logits, b.labels).item<double>();
            const double want = accel::compute_loss(loss, ref_logits, labels[0][0]).item<double>();
            EXPECT_NEAR(got, want, 1e-5 * want) << "forward's loss, rank " << comm->rank();
        }
    });
}

TEST(PipelineTensorParallel, GpipeEqualsOneProcess)
{
    check_training({});
    Layout untied;
    untied.tied = false;
    untied.layers = 3;
    check_training(untied);
}

TEST(PipelineTensorParallel, OneFOneBEqualsOneProcess)
{
    Layout l;
    l.schedule = "1f1b";
    l.micro = 4;
    check_training(l);
}

TEST(PipelineTensorParallel, InterleavedEqualsOneProcess)
{
    Layout l;
    l.schedule = "interleaved_1f1b";
    l.chunks = 2;
    check_training(l);
}

// Sequence parallelism: each tp rank sends its half of the positions to its counterpart on the next stage.
TEST(PipelineTensorParallel, SequenceParallelEqualsOneProcess)
{
    Layout l;
    l.sequence_parallel = true;
    check_training(l);
    l.schedule = "1f1b";
    l.tied = false;
    check_training(l);
}

// pp 2 x tp 2 x dp_replicate 2: DDP over each stage's replicas of each tp rank, each on half the rows.
TEST(PipelineTensorParallel, WithDataParallelReplicasEqualsOneProcess)
{
    Layout l;
    l.schedule = "1f1b";
    l.dp = 2;
    check_training(l);
}

// pp 2 x cp 2: each stage's attention over its cp group (ring, then all-gathered K/V), GPipe and 1F1B.
TEST(PipelineContextParallel, RingAndAllGatherEqualOneProcess)
{
    Layout l;
    l.tp = 1;
    l.cp = 2;
    check_training(l);
    l.schedule = "1f1b";
    l.micro = 4;
    l.cp_strategy = "allgather";
    l.tied = false;
    l.layers = 3;
    check_training(l);
}

// pp 2 x sp 2: Ulysses' all-to-all to head shards on the same mesh axis, GPipe and 1F1B.
TEST(PipelineContextParallel, UlyssesEqualsOneProcess)
{
    Layout l;
    l.tp = 1;
    l.cp = 2;
    l.cp_strategy = "ulysses";
    check_training(l);
    l.schedule = "1f1b";
    check_training(l);
}

// A length that is not a multiple of 2 x cp (7 of cp 2) is padded at its end (labels ignored): still one
// process's training; and the interleaved schedule.
TEST(PipelineContextParallel, PaddedLengthAndInterleavedEqualOneProcess)
{
    Layout l;
    l.tp = 1;
    l.cp = 2;
    l.seq = 7;
    l.schedule = "1f1b";
    check_training(l);
    l.seq = kSeq;
    l.schedule = "interleaved_1f1b";
    l.chunks = 2;
    check_training(l);
}

// The whole mesh: pp 2 x cp 2 x tp 2, and pp 2 x cp 2 x dp_replicate 2 (DDP over dp_cp of each stage).
TEST(PipelineContextParallel, WithTensorParallelAndReplicasEqualsOneProcess)
{
    Layout l;
    l.cp = 2;
    l.schedule = "1f1b";
    check_training(l);
    l.tp = 1;
    l.dp = 2;
    check_training(l);
}

// A llama (grouped-query attention, rotary embedding at each stage's whole-sequence positions) under pp 2 x cp 2:
// ring attention under GPipe, Ulysses under 1F1B with an untied head.
TEST(PipelineContextParallel, LlamaEqualsOneProcess)
{
    Layout l;
    l.tp = 1;
    l.cp = 2;
    l.json = accel_test::llama_json(4, true);
    check_training(l);
    l.cp_strategy = "ulysses";
    l.schedule = "1f1b";
    l.json = accel_test::llama_json(4, false);
    check_training(l);
}

// Generation under pp 2 x cp 2 runs whole, as under cp alone (every rank sets its stage's cp group aside): greedy
// with and without the key/value cache and sampled with a seed give one process's tokens on every rank.
void check_generation(const std::string &json)
{
    SCOPED_TRACE(json);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int r = 0; r <= 4; ++r) {
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json.c_str()));
        models.back()->train(false);
    }
    accel::config::GenerationConfig greedy, cached, sampled;
    greedy.max_new_tokens = cached.max_new_tokens = sampled.max_new_tokens = 3;
    greedy.use_cache = false;
    sampled.do_sample = true;
    sampled.seed = 5;
    at::manual_seed(43);
    const at::Tensor prompt = at::randint(0, kVocab, {2, 5}, at::kLong); // odd: no cp split could take it
    auto &ref = *models.back();
    const at::Tensor want_greedy = accel::generate(ref, prompt, greedy, false);
    const at::Tensor want_sampled = accel::generate(ref, prompt, sampled, false);
    dist::run_on_threads(4, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 1, 2), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        cp::prepare_context_parallel(m, mesh, "alltoall");
        accel::config::ParallelismConfig config;
        config.pp_size = 2;
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        EXPECT_TRUE(at::equal(accel::generate(m, prompt, greedy, false), want_greedy)) << "rank " << comm->rank();
        EXPECT_TRUE(at::equal(accel::generate(m, prompt, cached, false), want_greedy)) << "rank " << comm->rank();
        EXPECT_TRUE(at::equal(accel::generate(m, prompt, sampled, false), want_sampled)) << "rank " << comm->rank();
    });
}

TEST(PipelineContextParallel, GenerationRunsWholeAsOneProcess)
{
    check_generation(gpt_json(2, true));
    check_generation(accel_test::llama_json(2, false));
}

// What pp x cp refuses, on every rank before anything is sent (no stage is left waiting): a forward's local part
// that is not two equal chunks (a batch not split by the loader), and one whose whole sequence exceeds the positions.
TEST(PipelineContextParallel, RefusesOnEveryRank)
{
    const std::string json = gpt_json(2, true);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int r = 0; r < 4; ++r) models.push_back(accel::make_model_from_json(json.c_str()));
    dist::run_on_threads(4, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 1, 2), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        cp::prepare_context_parallel(m, mesh, "alltoall");
        accel::config::ParallelismConfig config;
        config.pp_size = 2;
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        at::Tensor ids = at::randint(0, kVocab, {2, 4}, at::kLong);
        EXPECT_EQ(catch_error([&] { m.forward(ids.narrow(1, 0, 3)); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
        const accel::Loss loss(accel::LossKind::CausalLm);
        EXPECT_EQ(catch_error([&] {
                      pipeline->run(
                          ids.narrow(1, 0, 3), ids.narrow(1, 0, 3),
                          [&](const at::Tensor &o, const at::Tensor &y) { return accel::compute_loss(loss, o, y); },
                          [](const at::Tensor &x) { return x; });
                  }).code(),
                  ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(catch_error([&] { m.forward(at::cat({ids, ids}, 1)); }).code(), ACCEL_ERR_INVALID_ARGUMENT); // 16 > 8 positions
        comm->barrier();
    });
}

// Llama (grouped-query attention) through the stages: pp 2 and 4, each schedule, tied and untied, pp 2 x tp 2 with
// and without sequence parallelism, pp 2 x dp_replicate 2, and LoRA adapters on the stages' layers, equal one process
// (20 AdamW steps with accumulation and clipping, fp32, 1e-5).
TEST(PipelineLlama, StagesEqualOneProcess)
{
    Layout l;
    l.tp = 1;
    l.json = accel_test::llama_json(4, true);
    check_training(l); // pp 2, gpipe
    l.pp = 4;
    l.schedule = "1f1b";
    l.micro = 4;
    l.json = accel_test::llama_json(4, false);
    check_training(l);
    l.pp = 2;
    l.schedule = "interleaved_1f1b";
    l.micro = 2;
    l.chunks = 2;
    l.json = accel_test::llama_json(4, true);
    check_training(l);
    // Mistral's sliding window (5 of 8 positions: the later stages mask as the first), Qwen2's q/k/v biases.
    l = Layout();
    l.tp = 1;
    l.json = accel_test::llama_json(4, true, R"(, "model_type": "mistral", "sliding_window": 5)");
    check_training(l);
    l.schedule = "1f1b";
    l.json = accel_test::llama_json(3, false, R"(, "model_type": "qwen2")");
    check_training(l);
}

TEST(PipelineLlama, WithTensorParallelAndReplicasEqualsOneProcess)
{
    Layout l;
    l.json = accel_test::llama_json(4, true);
    check_training(l); // pp 2 x tp 2
    l.sequence_parallel = true;
    l.schedule = "1f1b";
    l.json = accel_test::llama_json(3, false);
    check_training(l);
    l = Layout();
    l.tp = 1;
    l.dp = 2;
    l.json = accel_test::llama_json(4, true);
    check_training(l); // pp 2 x dp_replicate 2
}

// LoRA fine-tuning on the stages: each stage trains the adapters of its own layers (the base weights frozen); a
// gpt's too (its cut emptied them before).
TEST(PipelineLlama, LoraEqualsOneProcess)
{
    Layout l;
    l.tp = 1;
    l.schedule = "1f1b";
    l.json = accel_test::llama_json(4, false, R"(, "lora": {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj", "down_proj"]})");
    check_training(l);
    l.schedule = "gpipe";
    l.json = R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": 4, )"
             R"("lora": {"r": 2, "lora_alpha": 4, "target_modules": ["c_attn", "c_fc"]}})";
    check_training(l);
}

} // namespace
