// Pipeline parallelism (src/parallel/pipeline) on 2 and 4 stages played by threads: the stage cut, the
// schedules' transfer order (played against each other with rendezvous sends) and live activations, GPipe and
// 1F1B over micro-batches, alone and with DDP over two replicas of each stage (pp x dp), against one process
// training the whole model on the same batches (fp32, 20 AdamW steps with accumulation and clipping, tied and
// untied heads), each stage's parameter memory, forward and generation through the stages (the prepare_pippy
// equivalent) against one process, the whole model's weights and optimizer state for checkpoints (WholeStages),
// and what a pipeline model refuses (bad ids on every rank, batches that do not divide, a pipeline gone).
#include "catch_error.hpp"
#include "checkpointing/checkpointing.hpp"
#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "config/generation_config.hpp"
#include "config/optimizer_config.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "fresh_dir.hpp"
#include "model/generation.hpp"
#include "model/gpt_model.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/stage_sharded_checkpoint.hpp"
#include "parallel/pipeline/stages.hpp"
#include "parallel/whole_gradients.hpp"
#include "pipeline_models.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
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
// and each transfer meets the same micro-batch (and chunk) on the other side, else what went wrong. On a
// clock where a chunk's forward takes 1 / chunks and its backward 2 / chunks, a transfer happens when both
// sides are there: `idle` gets each stage's idle fraction of the whole schedule.
std::string play(const std::vector<std::vector<pp::Op>> &ops, int32_t chunks = 1, std::vector<double> *idle = nullptr)
{
    const auto stages = static_cast<int32_t>(ops.size());
    std::vector<size_t> at(static_cast<size_t>(stages), 0);
    std::vector<double> clock(static_cast<size_t>(stages), 0.0), busy(static_cast<size_t>(stages), 0.0);
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
                const double cost = (op->kind == K::Forward ? 1.0 : 2.0) / chunks;
                clock[static_cast<size_t>(s)] += cost;
                busy[static_cast<size_t>(s)] += cost;
                ++at[static_cast<size_t>(s)];
                moved = true;
                continue;
            }
            // A send meets the receive of the same kind on the next virtual stage (activations) or the previous
            // one (gradients).
            const bool send = op->kind == K::SendActivation || op->kind == K::SendGrad;
            if (!send) continue; // receives move with their send
            const pp::VirtualStage to = op->kind == K::SendActivation ? pp::next_virtual_stage(s, op->chunk, stages)
                                                                      : pp::previous_virtual_stage(s, op->chunk, stages);
            const int32_t peer = to.stage;
            const K want = op->kind == K::SendActivation ? K::RecvActivation : K::RecvGrad;
            const pp::Op *other = current(peer);
            if (other == nullptr || other->kind != want) continue;
            if (other->micro != op->micro || other->chunk != to.chunk)
                return "stage " + std::to_string(s) + " sends micro-batch " + std::to_string(op->micro) + " chunk " +
                       std::to_string(op->chunk) + ", stage " + std::to_string(peer) + " receives " +
                       std::to_string(other->micro) + " chunk " + std::to_string(other->chunk);
            const double when = std::max(clock[static_cast<size_t>(s)], clock[static_cast<size_t>(peer)]);
            clock[static_cast<size_t>(s)] = clock[static_cast<size_t>(peer)] = when;
            ++at[static_cast<size_t>(s)];
            ++at[static_cast<size_t>(peer)];
            moved = true;
        }
    }
    for (int32_t s = 0; s < stages; ++s)
        if (current(s) != nullptr) return "deadlock: stage " + std::to_string(s) + " stuck at op " + std::to_string(at[static_cast<size_t>(s)]);
    if (idle != nullptr) {
        const double end = *std::max_element(clock.begin(), clock.end()); // the step ends when the last stage does
        idle->clear();
        for (double b : busy) idle->push_back(1.0 - b / end);
    }
    return "";
}

std::vector<std::vector<pp::Op>> schedules(const std::string &schedule, int32_t stages, int64_t m, int32_t chunks = 1)
{
    std::vector<std::vector<pp::Op>> ops;
    for (int32_t s = 0; s < stages; ++s) ops.push_back(pp::stage_schedule(schedule, s, stages, m, chunks));
    return ops;
}

// Every (micro-batch, chunk)'s forward and backward exactly once on stage s, each after the receive of its
// input (not on the first virtual stage; the backward's from the next, not on the last) and before its send.
void expect_each_once_in_order(const std::vector<pp::Op> &ops, int32_t s, int32_t p, int64_t m, int32_t chunks)
{
    using K = pp::OpKind;
    std::map<std::tuple<int, int64_t, int32_t>, size_t> where; // (kind, micro, chunk) -> position
    for (size_t k = 0; k < ops.size(); ++k) {
        EXPECT_TRUE(where.emplace(std::make_tuple(static_cast<int>(ops[k].kind), ops[k].micro, ops[k].chunk), k).second)
            << "stage " << s << " op " << k << " twice";
    }
    auto pos = [&](K kind, int64_t i, int32_t c) {
        auto it = where.find({static_cast<int>(kind), i, c});
        return it == where.end() ? std::string::npos : it->second;
    };
    for (int64_t i = 0; i < m; ++i)
        for (int32_t c = 0; c < chunks; ++c) {
            const int32_t vs = c * p + s, last = p * chunks - 1;
            const size_t f = pos(K::Forward, i, c), b = pos(K::Backward, i, c);
            ASSERT_NE(f, std::string::npos) << "stage " << s << " micro " << i << " chunk " << c;
            ASSERT_NE(b, std::string::npos);
            EXPECT_LT(f, b);
            if (vs > 0) {
                EXPECT_LT(pos(K::RecvActivation, i, c), f);
                EXPECT_GT(pos(K::SendGrad, i, c), b);
                EXPECT_NE(pos(K::SendGrad, i, c), std::string::npos);
            }
            if (vs < last) {
                EXPECT_LT(pos(K::RecvGrad, i, c), b);
                EXPECT_GT(pos(K::SendActivation, i, c), f);
                EXPECT_NE(pos(K::SendActivation, i, c), std::string::npos);
            }
        }
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
    for (const char *schedule : {"gpipe", "1f1b"})
        for (int32_t s = 0; s < 3; ++s) expect_each_once_in_order(pp::stage_schedule(schedule, s, 3, 5), s, 3, 5, 1);
}

TEST(PipelineSchedule, OneFOneBHoldsFewerActivations)
{
    for (int32_t s = 0; s < 4; ++s) {
        EXPECT_EQ(pp::peak_live_micro_batches(pp::stage_schedule("gpipe", s, 4, 8)), 8);
        EXPECT_EQ(pp::peak_live_micro_batches(pp::stage_schedule("1f1b", s, 4, 8)), 4 - s);
    }
    EXPECT_EQ(pp::peak_live_micro_batches(pp::stage_schedule("1f1b", 0, 4, 2)), 2); // fewer micro-batches than stages
}

// The interleaved schedule (Megatron's, chunks model chunks per stage): transfers pair on the ring of stages
// without deadlock, each op in order, activations live at most warm-up + 1 chunks, and on the clock of play()
// every stage idles (p - 1) / (chunks m + p - 1) of the step, as the theory says; GPipe and 1F1B (p - 1) / (m + p - 1).
TEST(PipelineSchedule, InterleavedPairsWithoutDeadlockAndMeetsTheBubble)
{
    for (int32_t p = 2; p <= 4; ++p)
        for (int64_t m = p; m <= 8; m += p)
            for (int32_t v = 1; v <= 3; ++v) {
                SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m) + " v " + std::to_string(v));
                std::vector<double> idle;
                ASSERT_EQ(play(schedules("interleaved_1f1b", p, m, v), v, &idle), "");
                for (int32_t s = 0; s < p; ++s) {
                    const auto ops = pp::stage_schedule("interleaved_1f1b", s, p, m, v);
                    expect_each_once_in_order(ops, s, p, m, v);
                    const int64_t warmup = std::min<int64_t>(2 * (p - s - 1) + (v - 1) * p, m * v);
                    EXPECT_EQ(pp::peak_live_micro_batches(ops), std::min<int64_t>(warmup + 1, m * v)) << "stage " << s;
                    EXPECT_NEAR(idle[static_cast<size_t>(s)], (p - 1.0) / (v * m + p - 1.0), 1e-9) << "stage " << s;
                }
                if (v > 1) continue;
                for (const char *schedule : {"gpipe", "1f1b"}) {
                    ASSERT_EQ(play(schedules(schedule, p, m), 1, &idle), "");
                    for (int32_t s = 0; s < p; ++s) {
                        EXPECT_NEAR(idle[static_cast<size_t>(s)], (p - 1.0) / (m + p - 1.0), 1e-9) << schedule << " stage " << s;
                    }
                }
            }
    // Megatron's conditions, by name.
    auto refused = [](auto f) { return catch_error(f); };
    const accel::Error m_odd = refused([] { pp::stage_schedule("interleaved_1f1b", 0, 2, 3, 2); });
    EXPECT_EQ(m_odd.code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(m_odd.what()).find("num_micro_batches: 3 is not a multiple of pp_size (2)"), std::string::npos) << m_odd.what();
    EXPECT_EQ(refused([] { pp::stage_schedule("interleaved_1f1b", 0, 1, 2, 2); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(refused([] { pp::stage_schedule("1f1b", 0, 2, 2, 2); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
}

TEST(PipelineStages, ChunksPerStage)
{
    EXPECT_EQ(pp::chunks_per_stage(1, 0, 8, 4), 2); // MegatronLMPlugin's num_layers_per_virtual_pipeline_stage
    EXPECT_EQ(pp::chunks_per_stage(2, 0, 12, 2), 3);
    EXPECT_EQ(pp::chunks_per_stage(0, 2, 6, 2), 2); // Megatron-core's num_virtual_stages_per_pipeline_rank
    EXPECT_EQ(pp::chunks_per_stage(2, 3, 12, 2), 3); // both, agreeing
    for (auto bad : {std::vector<int64_t>{0, 0, 8, 2}, {3, 0, 8, 2}, {2, 3, 8, 2}, {0, 3, 5, 2}}) {
        const accel::Error e = catch_error([&] {
            pp::chunks_per_stage(bad[0], static_cast<int32_t>(bad[1]), bad[2], static_cast<int32_t>(bad[3]));
        });
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("parallelism_config."), std::string::npos) << e.what();
    }
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

// load_state's range load (a FULL folder's tensors straight into the engine's shards) of one process's final weights
// onto a sharded stage (the other stages' entries emptied, as load_state's stage_weights does): every parameter the
// stage holds then equals them bit for bit (the trained ones differ by rounding). A later stage's parameters come
// after the earlier stages' emptied ones in the shard layout: a load indexing the layout by the engine's own
// parameter order found no piece of them there.
void expect_range_load_reaches_every_piece(accel::Model &m, accel::parallel::ShardedDataParallel &engine,
                                           const accel::Model &ref, int32_t rank)
{
    accel::TensorList whole;
    for (const auto &entry : ref.state_dict(false)) {
        const at::Tensor *mine = m.find_tensor(entry.first);
        whole.emplace_back(entry.first, mine != nullptr && mine->numel() == 0 ? at::empty({0}, entry.second.options())
                                                                             : entry.second.detach().clone());
    }
    auto loaded = engine.load_sharded_state_dict(m, accel::ckpt::tensor_source(whole));
    loaded.first();
    engine.summon_full_params(true);
    for (const auto &entry : m.named_parameters())
        if (entry.second.numel() > 0) {
            EXPECT_TRUE(at::equal(entry.second, *ref.find_tensor(entry.first))) << entry.first << " loaded by range (rank " << rank << ")";
        }
    engine.summon_full_params(false);
}

// save_state's SHARDED_STATE_DICT under pp x sharding (whole_model_pieces): each stage's pieces under the whole model's
// names, written as save_state writes them (the first replica of each stage, as rank{stage x W + r}; the main process
// metadata.json), read back whole by the sharded folder's reader: one process's tensors, every name once (the tied
// embedding once), each within 1e-5 of the trained one-process model. Collective over the mesh's world.
void expect_whole_model_pieces(accel::Model &m, accel::parallel::ShardedDataParallel &engine, pp::PipelineParallel &pipeline,
                               const dist::DeviceMesh &mesh, const accel::Model &ref, const std::string &dir)
{
    const bool main = mesh.rank() == 0;
    const accel::ShardedState st = pp::whole_model_pieces(pipeline, engine.sharded_state_dict(m), main);
    EXPECT_EQ(st.world_size, pipeline.num_stages() * mesh.size(dist::MeshDim::DpShardCp));
    std::vector<accel::ckpt::CheckpointFile> files;
    const bool first_replica = mesh.rank_in(dist::MeshDim::DpReplicate) == 0;
    accel::ckpt::add_sharded_files(files, "pieces", st, first_replica ? st.rank : INT64_MAX, main);
    accel::ckpt::write_checkpoint({dir, {}}, files, main, [&mesh] { mesh.world()->barrier(); });
    if (!main) return;
    EXPECT_EQ(accel::list_dir(dir + "/pieces").size(), static_cast<size_t>(st.world_size) + 1); // + metadata.json
    const accel::TensorList got = accel::ckpt::read_sharded_tensors(dir + "/pieces");
    const accel::TensorList want = ref.state_dict(true);
    ASSERT_EQ(got.size(), want.size());
    std::map<std::string, at::Tensor> by_name(got.begin(), got.end());
    for (const auto &[name, t] : want) {
        ASSERT_TRUE(by_name.count(name)) << name;
        const double diff = (by_name.at(name) - t).abs().max().item<double>();
        EXPECT_LE(diff, 1e-5 * std::max(1.0, t.abs().max().item<double>())) << name << " of the sharded save";
    }
}

// `stages` ranks train through the pipeline (num_micro_batches 2 of a 4-row batch, accumulation 2, clipping
// to a norm the gradients exceed) what one process trains whole: 20 AdamW steps, the losses every rank
// reports, the clipped norms and every parameter a stage holds equal one process's within 1e-5 relative.
// With dp > 1 each stage has dp replicas (pp x dp, 2 x dp threads), each training its share of the batch's rows
// under DDP; the losses they report are their shares' and are not compared.
// `micro` micro-batches; `chunks` > 1: interleaved, that many chunks per stage (num_virtual_stages_per_pipeline_rank).
// `plugin` (an accelerator config's fsdp_plugin / deepspeed_plugin): the dp replicas shard each stage with the
// sharding engine instead of DDP (pp x sharding), the optimizer stepping its shards; `replicas` > 1: those dp
// processes are replicas x dp / replicas shards (HSDP: dp_replicate x dp_shard).
void check_training(int32_t stages, int64_t layers, bool tied, const std::vector<int64_t> &split_points,
                    const std::string &schedule = "gpipe", int32_t dp = 1, int64_t micro = kMicroBatches, int32_t chunks = 1,
                    const std::string &plugin = "", int32_t replicas = 1)
{
    SCOPED_TRACE(schedule + ", pp " + std::to_string(stages) + " x dp " + std::to_string(dp) + ", " + std::to_string(layers) +
                 " layers, " + (tied ? "tied" : "untied") + ", " + std::to_string(micro) + " micro-batches of " +
                 std::to_string(chunks) + " chunks" + (plugin.empty() ? "" : ", " + plugin));
    const accel::config::ShardingConfig sharding =
        plugin.empty() ? accel::config::ShardingConfig{} : accel::config::parse_accelerator_config(("{" + plugin + "}").c_str()).sharding;
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

    const std::string sharded_dir = fresh_dir("pp_sharded_state") + "/saved";
    dist::run_on_threads(stages * dp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t replicated = sharding.enabled() ? replicas : dp;
        dist::DeviceMesh mesh(dist::mesh_shape(replicated, dp / replicated, 1, 1, stages), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const int64_t rows = 4 / dp, first_row = mesh.rank_in(dist::MeshDim::Dp) * rows; // this replica's share
        accel::config::ParallelismConfig config;
        config.pp_size = stages;
        config.pp_schedule = schedule;
        config.num_micro_batches = static_cast<int32_t>(micro);
        config.pp_split_points = split_points;
        if (chunks > 1) config.num_virtual_stages_per_pipeline_rank = chunks;
        std::vector<at::Tensor> stepped = m.parameters(); // taken before the cut, as a user's optimizer may take them
        auto pipeline = pp::prepare_pipeline(m, mesh, config, nullptr, sharding.enabled() ? &sharding : nullptr);
        accel::parallel::ShardedDataParallel *engine = pipeline->sharded();
        if (engine != nullptr) stepped = engine->optimizer_params();
        if (engine != nullptr && sharding.activation_checkpointing) m.set_activation_checkpointing(engine->checkpointed_layers());
        auto opt = adamw(stepped);
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
            if (engine != nullptr) { // the shards' gradients are views of the engine's buffers: it drops them
                engine->after_optimizer_step();
                engine->zero_grad();
            } else {
                opt.zero_grad();
            }
        }
        if (engine != nullptr) {
            // (DeepSpeed's layout under pp: pipeline_deepspeed_checkpoint_test.cpp.)
            if (sharding.state_dict_type == "SHARDED_STATE_DICT")
                expect_whole_model_pieces(m, *engine, *pipeline, mesh, ref, sharded_dir);
            engine->summon_full_params(true); // whole parameters to compare
        }
        EXPECT_GT(pipeline->last_times().wall, 0.0);
        EXPECT_GT(pipeline->last_times().busy, 0.0);
        const int32_t stage = pipeline->stage();
        EXPECT_EQ(pipeline->last_times().peak_live,
                  schedule == "gpipe"  ? micro
                  : schedule == "1f1b" ? std::min<int64_t>(stages - stage, micro)
                                       : pp::peak_live_micro_batches(pp::stage_schedule(schedule, stage, stages, micro, chunks)));
        EXPECT_EQ(pipeline->chunks(), chunks);
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            if (p.numel() == 0) continue; // another stage's
            const at::Tensor &whole = ref.named_parameters()[i].second;
            const double diff = (p - whole).abs().max().item<double>();
            EXPECT_LE(diff, 1e-5 * std::max(1.0, whole.abs().max().item<double>()))
                << name << " after training (stage " << comm->rank() << ")";
        }
        if (engine != nullptr) {
            engine->summon_full_params(false);
            expect_range_load_reaches_every_piece(m, *engine, ref, comm->rank());
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

// Interleaved 1F1B: 2 and 3 chunks per stage on 2 and 4 stages (the ring of stages gone round 2 or 3 times),
// with explicit split points of the virtual stages, and under DDP (each chunk's gradients synchronised at its
// last backward), equal one process (and so GPipe, which the tests above hold to the same).
TEST(PipelineParallelInterleaved, EqualsOneProcess)
{
    check_training(2, 4, true, {}, "interleaved_1f1b", 1, 2, 2);
    check_training(4, 8, true, {}, "interleaved_1f1b", 1, 4, 2);
    check_training(2, 6, false, {}, "interleaved_1f1b", 1, 4, 3);
    check_training(2, 5, true, {1, 3, 4}, "interleaved_1f1b", 1, 2, 2);
    check_training(2, 4, false, {}, "interleaved_1f1b", 2, 2, 2);
}

// pp x dp: two replicas of each stage under DDP, each on half the rows, equal one process on all of them.
TEST(PipelineParallelDp, TwoStagesTimesTwoReplicasEqualOneProcess)
{
    check_training(2, 4, true, {}, "gpipe", 2);
    check_training(2, 3, false, {}, "1f1b", 2);
}

// pp x sharding: each stage's parameters sharded over its two dp processes (FSDP FULL_SHARD wrapping every block,
// DeepSpeed ZeRO-1, ZeRO-2 and ZeRO-3, SHARD_GRAD_OP), each on half the rows, equal one process on all of them: the
// micro-batches' gradients accumulated unsharded until the schedule ends, the tied embedding's exchange before the
// reduction, the clipping norm over every stage's shards.
TEST(PipelineParallelSharded, TwoStagesTimesTwoShardsEqualOneProcess)
{
    const std::string full_shard = R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": )"
                                   R"("TRANSFORMER_BASED_WRAP", "transformer_cls_names_to_wrap": ["gpt_block"]})";
    check_training(2, 4, true, {}, "gpipe", 2, 2, 1, full_shard);
    check_training(2, 3, false, {}, "1f1b", 2, 2, 1, R"("deepspeed_plugin": {"zero_stage": 3})");
    check_training(2, 4, true, {}, "1f1b", 2, 2, 1, R"("deepspeed_plugin": {"zero_stage": 2})");
    check_training(2, 4, true, {}, "gpipe", 2, 2, 1, R"("deepspeed_plugin": {"zero_stage": 1})");
    check_training(2, 4, true, {}, "gpipe", 2, 2, 1, R"("fsdp_plugin": {"sharding_strategy": "SHARD_GRAD_OP", )"
                                                      R"("state_dict_type": "SHARDED_STATE_DICT", )"
                                                      R"("auto_wrap_policy": "TRANSFORMER_BASED_WRAP", )"
                                                      R"("transformer_cls_names_to_wrap": ["gpt_block"]})");
    // Activation checkpointing (the blocks recomputed in backward, each gathered again for it), interleaved.
    check_training(2, 4, true, {}, "interleaved_1f1b", 2, 2, 2,
                   R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "activation_checkpointing": true, )"
                   R"("auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "transformer_cls_names_to_wrap": ["gpt_block"]})");
}

// HSDP on 8 thread ranks: each stage sharded over 2 processes and replicated twice (pp 2 x dp_replicate 2 x
// dp_shard 2, the mesh's HYBRID_SHARD), one row each, equal one process on the 4 rows. Its SHARDED_STATE_DICT: the
// first replica of each stage writes its pieces (4 rank files), which read back as one process's model.
TEST(PipelineParallelSharded, ReplicatedShardsEqualOneProcess)
{
    check_training(2, 4, true, {}, "1f1b", 4, 1, 1,
                   R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", )"
                   R"("state_dict_type": "SHARDED_STATE_DICT", "transformer_cls_names_to_wrap": ["gpt_block"]})", 2);
}

// What a stage of a model refuses: ids it cannot embed (on every rank alike: no stage is left waiting), a
// batch whose rows do not divide into the micro-batches, and a whole forward once its pipeline is gone.
TEST(PipelineParallelGpipe, RefusesWhatIsNotBuilt)
{
    const std::string json = gpt_json(2, true);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int r = 0; r < 2; ++r) models.push_back(accel::make_model_from_json(json.c_str()));
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, 2), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        accel::config::ParallelismConfig config;
        config.pp_size = 2;
        config.num_micro_batches = 3;
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        at::Tensor ids = at::randint(0, 37, {4, 8}, at::kLong);
        EXPECT_EQ(catch_error([&] { m.forward(ids + 37); }).code(), ACCEL_ERR_OUT_OF_RANGE);
        EXPECT_EQ(catch_error([&] { m.forward(ids.to(at::kFloat)); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(catch_error([&] { m.forward(at::cat({ids, ids}, 1)); }).code(), ACCEL_ERR_INVALID_ARGUMENT); // 16 > n_positions
        const accel::Loss loss(accel::LossKind::CausalLm);
        EXPECT_EQ(catch_error([&] {
                      pipeline->run(
                          ids, ids, [&](const at::Tensor &o, const at::Tensor &y) { return accel::compute_loss(loss, o, y); },
                          [](const at::Tensor &l) { return l; });
                  }).code(),
                  ACCEL_ERR_INVALID_ARGUMENT);
        comm->barrier();
        pipeline.reset();
        EXPECT_EQ(catch_error([&] { m.forward(ids); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    });
}

// The prepare_pippy equivalent: forward() of every stage returns the whole model's logits (equal to one
// process's within 1e-6, rows split into micro-batches, a row count that does not divide included, and one
// unbatched sequence), and generate() the same tokens (greedy with and without the key/value cache, sampled
// with a seed), on every rank. `llama`: the llama of pipeline_models.hpp instead of the gpt.
void check_inference(int32_t stages, int64_t layers, bool tied, int32_t micro_batches, int32_t chunks = 1, bool llama = false)
{
    SCOPED_TRACE("pp " + std::to_string(stages) + " x " + std::to_string(chunks) + " chunks, " + std::to_string(layers) +
                 " layers, " + std::to_string(micro_batches) + " micro-batches, " + (tied ? "tied" : "untied") +
                 (llama ? ", llama" : ""));
    const std::string json = llama ? accel_test::llama_json(layers, tied) : gpt_json(layers, tied);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= stages; ++r) {
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json.c_str()));
        models.back()->train(false);
    }
    auto &ref = *models.back();
    at::manual_seed(43);
    const at::Tensor ids = at::randint(0, 37, {5, 6}, at::kLong);
    const at::Tensor want = ref.forward(ids).detach(), want_one = ref.forward(ids[2]).detach();
    accel::config::GenerationConfig greedy, cached, sampled;
    greedy.max_new_tokens = cached.max_new_tokens = sampled.max_new_tokens = 2;
    greedy.use_cache = false;
    cached.use_cache = true;
    sampled.do_sample = true;
    sampled.seed = 5;
    const at::Tensor prompt = ids.narrow(1, 0, 4);
    const at::Tensor want_greedy = accel::generate(ref, prompt, greedy, false);
    const at::Tensor want_sampled = accel::generate(ref, prompt, sampled, false);
    dist::run_on_threads(stages, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, stages), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        accel::config::ParallelismConfig config;
        config.pp_size = stages;
        config.num_micro_batches = micro_batches;
        if (chunks > 1) {
            config.pp_schedule = "interleaved_1f1b";
            config.num_virtual_stages_per_pipeline_rank = chunks;
        }
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        const at::Tensor got = m.forward(ids);
        ASSERT_EQ(got.sizes(), want.sizes()) << "rank " << comm->rank();
        EXPECT_LE((got - want).abs().max().item<double>(), 1e-6) << "rank " << comm->rank();
        EXPECT_FALSE(got.requires_grad());
        const at::Tensor one = m.forward(ids[2]);
        ASSERT_EQ(one.sizes(), want_one.sizes());
        EXPECT_LE((one - want_one).abs().max().item<double>(), 1e-6) << "rank " << comm->rank();
        EXPECT_TRUE(at::equal(accel::generate(m, prompt, greedy, false), want_greedy)) << "rank " << comm->rank();
        EXPECT_TRUE(at::equal(accel::generate(m, prompt, cached, false), want_greedy)) << "rank " << comm->rank();
        EXPECT_TRUE(at::equal(accel::generate(m, prompt, sampled, false), want_sampled)) << "rank " << comm->rank();
    });
}

TEST(PipelineParallelInference, ForwardAndGenerateEqualOneProcess)
{
    check_inference(2, 4, true, 2);
    check_inference(2, 3, false, 3);
    check_inference(4, 4, true, 8); // more micro-batches than rows: one row each
    check_inference(2, 4, true, 2, 2); // interleaved: two chunks per stage, through the ring twice
}

TEST(PipelineLlama, ForwardAndGenerateEqualOneProcess)
{
    check_inference(2, 4, true, 2, 1, true);
    check_inference(4, 4, false, 3, 1, true);
    check_inference(2, 4, false, 2, 2, true); // interleaved
}

std::shared_ptr<accel::AcceleratedOptimizer> adamw_of(const std::shared_ptr<accel::Model> &m)
{
    return std::make_shared<accel::AcceleratedOptimizer>(
        m, accel::config::parse_optimizer_config(R"({"type": "adamw", "lr": 0.003, "weight_decay": 0.01, "eps": 1e-6})"));
}

// {parameter index: {key: tensor}} of an optimizer's state_dict(), and the step counts as tensors too.
std::map<int64_t, std::map<std::string, at::Tensor>> state_of(const accel::AcceleratedOptimizer &o)
{
    std::map<int64_t, std::map<std::string, at::Tensor>> out;
    const accel::PyRef sd = o.state_dict();
    for (const auto &[key, entry] : sd->get("state")->map)
        for (const auto &[name, value] : entry->map)
            if (value->kind == accel::PyObj::Kind::Tensor) out[key->i][name->s] = value->tensor;
    return out;
}

// Checkpoints of a pipeline model (WholeStages, as save_state and load_state hold it): after 3 steps through the
// stages, every rank holds the whole model and the optimizer state of every parameter, equal to one process's
// (the same steps), and afterwards only its stage's again. Loading one process's state (weights and optimizer)
// through it leaves each stage with that state of its own parameters.
void check_whole_stages(const std::string &json)
{
    SCOPED_TRACE(json);
    const int32_t stages = 2;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= stages; ++r) {
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json.c_str()));
        models.back()->train(false);
    }
    constexpr int kSteps3 = 3;
    at::manual_seed(42);
    const at::Tensor ids = at::randint(0, 37, {kSteps3, 4, 8}, at::kLong), labels = at::randint(0, 37, {kSteps3, 4, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto ref_opt = adamw_of(models.back());
    for (int s = 0; s < kSteps3; ++s) {
        accel::compute_loss(causal, models.back()->forward(ids[s]), labels[s]).backward();
        ref_opt->step();
        ref_opt->zero_grad();
    }
    const auto want_state = state_of(*ref_opt);
    const accel::PyRef ref_sd = ref_opt->state_dict();
    const auto ref_weights = models.back()->state_dict(false);
    dist::run_on_threads(stages, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 1, stages), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        auto opt = adamw_of(models[static_cast<size_t>(comm->rank())]);
        accel::config::ParallelismConfig config;
        config.pp_size = stages;
        config.num_micro_batches = 2;
        auto pipeline = pp::prepare_pipeline(m, mesh, config);
        for (int s = 0; s < kSteps3; ++s) {
            pipeline->run(
                ids[s], labels[s], [&](const at::Tensor &o, const at::Tensor &y) { return accel::compute_loss(causal, o, y); },
                [](const at::Tensor &l) { return l; });
            opt->step();
            opt->zero_grad();
        }
        const size_t own = state_of(*opt).size();
        EXPECT_LT(own, want_state.size());
        {
            const pp::WholeStages whole(pipeline.get(), {opt.get()}, true);
            for (const auto &[name, t] : m.named_parameters()) {
                const at::Tensor &w = *models.back()->find_tensor(name);
                ASSERT_EQ(t.sizes(), w.sizes()) << name;
                EXPECT_LE((t - w).abs().max().item<double>(), 1e-5) << name;
            }
            const auto got = state_of(*opt);
            ASSERT_EQ(got.size(), want_state.size()) << "rank " << comm->rank();
            for (const auto &[index, entry] : want_state)
                for (const auto &[key, t] : entry) {
                    const at::Tensor &g = got.at(index).at(key);
                    EXPECT_LE((g.to(at::kDouble) - t.to(at::kDouble)).abs().max().item<double>(), 1e-5 * std::max(1.0, t.abs().max().item<double>()))
                        << "state " << index << " " << key << " rank " << comm->rank();
                }
        }
        EXPECT_EQ(state_of(*opt).size(), own); // the borrowed state went with the borrowed parameters
        {
            // save_state's mode: the writer's first stage alone holds the whole model and its optimizer state (the
            // others take part in the broadcasts and keep nothing).
            const pp::WholeStages first(pipeline.get(), {opt.get()}, true, pp::WholeStages::FirstStageOnly{comm->rank() == 0});
            int64_t filled = 0;
            for (const auto &[name, t] : m.named_parameters()) {
                if (t.numel() == 0) continue;
                ++filled;
                if (comm->rank() == 0) {
                    EXPECT_LE((t - *models.back()->find_tensor(name)).abs().max().item<double>(), 1e-5) << name;
                }
            }
            const auto whole_count = static_cast<int64_t>(m.named_parameters().size());
            if (comm->rank() == 0) {
                EXPECT_EQ(filled, whole_count);
                EXPECT_EQ(state_of(*opt).size(), want_state.size());
            } else {
                EXPECT_LT(filled, whole_count);
                EXPECT_EQ(state_of(*opt).size(), own);
            }
        }
        EXPECT_EQ(state_of(*opt).size(), own);
        int64_t held = 0;
        for (const auto &np : m.named_parameters()) held += np.second.numel() > 0 ? 1 : 0;
        EXPECT_LT(held, static_cast<int64_t>(m.named_parameters().size()));
        // Load: one process's state, read whole, each stage keeping its own.
        models[static_cast<size_t>(comm->rank())]->train(false);
        auto fresh = adamw_of(models[static_cast<size_t>(comm->rank())]);
        {
            const pp::WholeStages whole(pipeline.get(), {fresh.get()}, false);
            auto copy = [](const at::Tensor &d, const at::Tensor &s) {
                at::NoGradGuard no_grad;
                d.copy_(s);
            };
            EXPECT_TRUE(m.load_state_dict(ref_weights, true, copy).empty());
            fresh->load_state_dict(*ref_sd, "optimizer.bin", copy)();
        }
        EXPECT_EQ(state_of(*fresh).size(), own);
        for (const auto &[name, t] : m.named_parameters())
            if (t.numel() > 0) {
                EXPECT_TRUE(at::equal(t, *models.back()->find_tensor(name))) << name;
            }
    });
}

TEST(PipelineParallelCheckpoint, WholeStagesHoldOneProcessState) { check_whole_stages(gpt_json(4, true)); }

// The llama's whole model for checkpoints (save_model / save_state / load_state hold WholeStages): its names and
// one process's weights and optimizer state, tied and untied.
TEST(PipelineLlama, WholeStagesHoldOneProcessState)
{
    check_whole_stages(accel_test::llama_json(4, true));
    check_whole_stages(accel_test::llama_json(3, false));
}

} // namespace
