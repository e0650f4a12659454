// Pipeline parallelism (src/parallel/pipeline) on 2 and 4 stages played by threads: the stage cut, the
// schedules' transfer order (played against each other with rendezvous sends) and live activations, GPipe and
// 1F1B over micro-batches, alone and with DDP over two replicas of each stage (pp x dp), against one process
// training the whole model on the same batches (fp32, 20 AdamW steps with accumulation and clipping, tied and
// untied heads), each stage's parameter memory, and what a pipeline model refuses (forward, generation,
// checkpoints, batches that do not divide).
#include "catch_error.hpp"
#include "common/error.hpp"
#include "config/generation_config.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/generation.hpp"
#include "model/gpt_model.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/stages.hpp"
#include "parallel/whole_gradients.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace pp = accel::parallel::pp;

namespace {

TEST(PipelineStages, BalancedByParameterCount)
{
    EXPECT_EQ(pp::balanced_stage_starts({5, 5, 5, 5}, 2), (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(pp::balanced_stage_starts({5, 5, 5, 5}, 4), (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(pp::balanced_stage_starts({1, 1, 1, 1, 1}, 2), (std::vector<int64_t>{0, 3})); // the last stage lighter
    EXPECT_EQ(pp::balanced_stage_starts({8, 1, 1, 1, 1, 1, 1, 1, 1}, 2), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(pp::balanced_stage_starts({1, 1, 6, 1, 1}, 3), (std::vector<int64_t>{0, 2, 3}));
    EXPECT_EQ(catch_error([] { pp::balanced_stage_starts({1, 1}, 3); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
}

TEST(PipelineStages, SplitPointsChecked)
{
    EXPECT_EQ(pp::stage_starts_from_split_points({1, 3}, 4, 3), (std::vector<int64_t>{0, 1, 3}));
    EXPECT_EQ(catch_error([] { pp::stage_starts_from_split_points({1}, 4, 3); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(catch_error([] { pp::stage_starts_from_split_points({2, 2}, 4, 3); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(catch_error([] { pp::stage_starts_from_split_points({4}, 4, 2); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
}

// Plays every stage's schedule against its neighbours with transfers that complete only when both sides
// have reached them (a send that waits for its receive, as NCCL's may): returns "" when every stage finishes
// and each transfer meets the same micro-batch on the other side, else what went wrong.
std::string play(const std::vector<std::vector<pp::Op>> &ops)
{
    const auto stages = static_cast<int32_t>(ops.size());
    std::vector<size_t> at(static_cast<size_t>(stages), 0);
    auto current = [&](int32_t s) -> const pp::Op * {
        const auto &o = ops[static_cast<size_t>(s)];
        return at[static_cast<size_t>(s)] < o.size() ? &o[at[static_cast<size_t>(s)]] : nullptr;
    };
    for (bool moved = true; moved;) {
        moved = false;
        for (int32_t s = 0; s < stages; ++s) {
            const pp::Op *op = current(s);
            if (op == nullptr) continue;
            using K = pp::OpKind;
            if (op->kind == K::Forward || op->kind == K::Backward) {
                ++at[static_cast<size_t>(s)];
                moved = true;
                continue;
            }
            // A send meets the neighbour's receive of the same kind (activations forward, gradients back).
            const bool send = op->kind == K::SendActivation || op->kind == K::SendGrad;
            if (!send) continue; // receives move with their send
            const int32_t peer = op->kind == K::SendActivation ? s + 1 : s - 1;
            const K want = op->kind == K::SendActivation ? K::RecvActivation : K::RecvGrad;
            const pp::Op *other = current(peer);
            if (other == nullptr || other->kind != want) continue;
            if (other->micro != op->micro)
                return "stage " + std::to_string(s) + " sends micro-batch " + std::to_string(op->micro) + ", stage " +
                       std::to_string(peer) + " receives " + std::to_string(other->micro);
            ++at[static_cast<size_t>(s)];
            ++at[static_cast<size_t>(peer)];
            moved = true;
        }
    }
    for (int32_t s = 0; s < stages; ++s)
        if (current(s) != nullptr) return "deadlock: stage " + std::to_string(s) + " stuck at op " + std::to_string(at[static_cast<size_t>(s)]);
    return "";
}

std::vector<std::vector<pp::Op>> schedules(const std::string &schedule, int32_t stages, int64_t m)
{
    std::vector<std::vector<pp::Op>> ops;
    for (int32_t s = 0; s < stages; ++s) ops.push_back(pp::stage_schedule(schedule, s, stages, m));
    return ops;
}

TEST(PipelineSchedule, TransfersPairWithoutDeadlock)
{
    for (const char *schedule : {"gpipe", "1f1b"})
        for (int32_t p = 1; p <= 6; ++p)
            for (int64_t m = 1; m <= 10; ++m) {
                EXPECT_EQ(play(schedules(schedule, p, m)), "") << schedule << " p " << p << " m " << m;
                for (int32_t s = 0; s < p; ++s) {
                    const auto ops = pp::stage_schedule(schedule, s, p, m);
                    // Every micro-batch's forward and backward exactly once, forward first.
                    std::map<int64_t, int> seen;
                    for (const auto &op : ops) {
                        if (op.kind == pp::OpKind::Forward) {
                            EXPECT_EQ(seen[op.micro]++, 0);
                        }
                        if (op.kind == pp::OpKind::Backward) {
                            EXPECT_EQ(seen[op.micro]++, 1);
                        }
                    }
                    EXPECT_EQ(seen.size(), static_cast<size_t>(m));
                }
            }
    // The order a naive 1F1B would use (send the newest activation, then receive the oldest gradient) has
    // both sides of a link send at once: the player must see it.
    auto naive = schedules("1f1b", 2, 4);
    for (size_t i = 0; i + 1 < naive[0].size(); ++i)
        if (naive[0][i].kind == pp::OpKind::RecvGrad && naive[0][i + 1].kind == pp::OpKind::SendActivation)
            std::swap(naive[0][i], naive[0][i + 1]);
    EXPECT_NE(play(naive).find("deadlock"), std::string::npos);
    EXPECT_EQ(catch_error([] { pp::stage_schedule("interleaved", 0, 2, 2); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
}

TEST(PipelineSchedule, OneFOneBHoldsFewerActivations)
{
    for (int32_t s = 0; s < 4; ++s) {
        EXPECT_EQ(pp::peak_live_micro_batches(pp::stage_schedule("gpipe", s, 4, 8)), 8);
        EXPECT_EQ(pp::peak_live_micro_batches(pp::stage_schedule("1f1b", s, 4, 8)), 4 - s);
    }
    EXPECT_EQ(pp::peak_live_micro_batches(pp::stage_schedule("1f1b", 0, 4, 2)), 2); // fewer micro-batches than stages
}

std::string gpt_json(int64_t layers, bool tied)
{
    return std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": )") +
           std::to_string(layers) + ", \"tie_word_embeddings\": " + (tied ? "true" : "false") + "}";
}

constexpr int kSteps = 20, kAccum = 2;
constexpr int64_t kMicroBatches = 2; // of a 4-row batch

int64_t bytes_of(const accel::Model &m)
{
    int64_t n = 0;
    for (const auto &np : m.named_parameters()) n += np.second.numel() * np.second.element_size();
    return n;
}

// `stages` ranks train through the pipeline (num_micro_batches 2 of a 4-row batch, accumulation 2, clipping
// to a norm the gradients exceed) what one process trains whole: 20 AdamW steps, the losses every rank
// reports, the clipped norms and every parameter a stage holds equal one process's within 1e-5 relative.
// With dp > 1 each stage has dp replicas (pp x dp, 2 x dp threads), each training its share of the batch's rows
// under DDP; the losses they report are their shares' and are not compared.
void check_training(int32_t stages, int64_t layers, bool tied, const std::vector<int64_t> &split_points,
                    const std::string &schedule = "gpipe", int32_t dp = 1)
{
    SCOPED_TRACE(schedule + ", pp " + std::to_string(stages) + " x dp " + std::to_string(dp) + ", " + std::to_string(layers) +
                 " layers, " + (tied ? "tied" : "untied"));
    const std::string json = gpt_json(layers, tied);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= stages * dp; ++r) { // the same seed: every stage starts from one process's weights
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json.c_str()));
        models.back()->train(false); // no dropout
    }
    constexpr double kClip = 0.05, kLr = 3e-3;
    at::manual_seed(42);
    at::Tensor ids = at::randint(0, 37, {kSteps, kAccum, 4, 8}, at::kLong);
    at::Tensor labels = at::randint(0, 37, {kSteps, kAccum, 4, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto adamw = [&](const std::vector<at::Tensor> &params) {
        // eps 1e-6: the key bias's gradient is zero in exact arithmetic (softmax ignores a constant added to
        // every score), so in float32 it is rounding noise, which AdamW's default eps (1e-8) would turn into
        // full-size steps of opposite signs on the two sides.
        return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.01).eps(1e-6));
    };

    auto &ref = *models.back();
    const int64_t whole_bytes = bytes_of(ref);
    auto ref_opt = adamw(ref.parameters());
    std::vector<double> ref_norms, ref_losses;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kAccum; ++k) {
            at::Tensor l = accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]);
            ref_losses.push_back(l.item<double>());
            (l / static_cast<double>(kAccum)).backward();
        }
        ref_norms.push_back(accel::parallel::whole_clip_grad_norm(ref.parameters(), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }

    dist::run_on_threads(stages * dp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(dp, 1, 1, 1, stages), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const int64_t rows = 4 / dp, first_row = mesh.rank_in(dist::MeshDim::Dp) * rows; // this replica's share
        accel::config::ParallelismConfig config;
        config.pp_size = stages;
        config.pp_schedule = schedule;
        config.num_micro_batches = kMicroBatches;
        config.pp_split_points = split_points;
        auto opt = adamw(m.parameters()); // made before the cut, as a user's optimizer may be
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        // Each stage holds its share of the blocks, plus the embeddings (first) or the head (last).
        const auto &c = dynamic_cast<accel::GptModel &>(m).config();
        const int64_t embeddings = (c.vocab_size + c.n_positions) * c.n_embd * 4 * (tied ? 1 : 2);
        if (split_points.empty() && layers % stages == 0) {
            EXPECT_LE(bytes_of(m), whole_bytes / stages + embeddings) << "stage " << comm->rank();
        }
        EXPECT_LT(bytes_of(m), whole_bytes);
        const accel::Loss loss(accel::LossKind::CausalLm);
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kAccum; ++k) {
                pipeline->set_require_sync(k == kAccum - 1);
                const double got = pipeline->run(
                    ids[s][k].narrow(0, first_row, rows), labels[s][k].narrow(0, first_row, rows),
                    [&](const at::Tensor &out, const at::Tensor &y) { return accel::compute_loss(loss, out, y); },
                    [](const at::Tensor &l) { return l / static_cast<double>(kAccum); });
                const double want = ref_losses[static_cast<size_t>(s * kAccum + k)];
                if (dp == 1) {
                    EXPECT_NEAR(got, want, 1e-5 * want) << "step " << s << " rank " << comm->rank();
                }
            }
            const double norm = pipeline->clip_grad_norm(kClip, 2.0, true);
            EXPECT_NEAR(norm, ref_norms[static_cast<size_t>(s)], 1e-5 * ref_norms[static_cast<size_t>(s)]) << "step " << s;
            opt.step();
            opt.zero_grad();
        }
        EXPECT_GT(pipeline->last_times().wall, 0.0);
        EXPECT_GT(pipeline->last_times().busy, 0.0);
        const int32_t stage = pipeline->stage();
        EXPECT_EQ(pipeline->last_times().peak_live, schedule == "gpipe" ? kMicroBatches : std::min<int64_t>(stages - stage, kMicroBatches));
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            if (p.numel() == 0) continue; // another stage's
            const at::Tensor &whole = ref.named_parameters()[i].second;
            const double diff = (p - whole).abs().max().item<double>();
            EXPECT_LE(diff, 1e-5 * std::max(1.0, whole.abs().max().item<double>()))
                << name << " after training (stage " << comm->rank() << ")";
        }
    });
}

TEST(PipelineParallelGpipe, TwoStagesEqualOneProcess)
{
    check_training(2, 4, true, {});
    check_training(2, 3, false, {});
}

TEST(PipelineParallelGpipe, FourStagesEqualOneProcess)
{
    check_training(4, 4, true, {});
    check_training(4, 6, true, {1, 2, 5}); // explicit split points, uneven stages
}

TEST(PipelineParallel1F1B, EqualsOneProcess)
{
    check_training(2, 4, true, {}, "1f1b");
    check_training(4, 6, true, {1, 2, 5}, "1f1b");
    check_training(4, 4, false, {}, "1f1b");
}

// pp x dp: two replicas of each stage under DDP, each on half the rows, equal one process on all of them.
TEST(PipelineParallelDp, TwoStagesTimesTwoReplicasEqualOneProcess)
{
    check_training(2, 4, true, {}, "gpipe", 2);
    check_training(2, 3, false, {}, "1f1b", 2);
}

// What a stage of a model cannot do: a whole forward, generation, a checkpoint of its stage alone, or a
// batch whose rows do not divide into the micro-batches.
TEST(PipelineParallelGpipe, RefusesWhatIsNotBuilt)
{
    const std::string json = gpt_json(2, true);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int r = 0; r < 2; ++r) models.push_back(accel::make_model_from_json(json.c_str()));
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, 2), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        EXPECT_NO_THROW(pp::refuse_checkpoint_of_pipeline_model(m, "save_state"));
        accel::config::ParallelismConfig config;
        config.pp_size = 2;
        config.num_micro_batches = 3;
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        at::Tensor ids = at::randint(0, 37, {4, 8}, at::kLong);
        EXPECT_EQ(catch_error([&] { m.forward(ids); }).code(), ACCEL_ERR_UNIMPLEMENTED);
        accel::config::GenerationConfig options;
        options.max_new_tokens = 2;
        const accel::Error refused = catch_error([&] { accel::generate(m, ids.narrow(1, 0, 4), options, false); });
        EXPECT_EQ(refused.code(), ACCEL_ERR_UNIMPLEMENTED) << refused.what();
        EXPECT_EQ(catch_error([&] { pp::refuse_checkpoint_of_pipeline_model(m, "save_state"); }).code(), ACCEL_ERR_UNIMPLEMENTED);
        const accel::Loss loss(accel::LossKind::CausalLm);
        EXPECT_EQ(catch_error([&] {
                      pipeline->run(
                          ids, ids, [&](const at::Tensor &o, const at::Tensor &y) { return accel::compute_loss(loss, o, y); },
                          [](const at::Tensor &l) { return l; });
                  }).code(),
                  ACCEL_ERR_INVALID_ARGUMENT);
    });
}

} // namespace
