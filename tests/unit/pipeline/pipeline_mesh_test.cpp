// Every mesh dimension at once (issue 36): pipeline stages sharded by the engine (fsdp_plugin / deepspeed_plugin over
// dp_shard, and HSDP's dp_replicate) while each stage is also split by tensor parallelism (pp x tp x dp_shard) or its
// sequence by context parallelism (pp x cp x dp_shard, ring attention and Ulysses), played by threads. Each layout
// trains 20 AdamW steps with accumulation and clipping as one process trains the whole model on the same global
// batch: the losses (averaged over the data-parallel ranks, which each train their share of the rows), the clipped
// norms (every stage's shards, each tp slice once, the tied embedding once) and every rank's slices of the final
// weights (summoned from the shards) within 1e-5 relative.
#include "config/accelerator_config.hpp"
#include "config/parallelism_config.hpp"
#include "data_loader/dataset.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/context_parallel/plan.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/pipeline_parallel.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/whole_gradients.hpp"
#include "pipeline_models.hpp"
#include "tp_slices_check.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace cp = accel::parallel::cp;
namespace pp = accel::parallel::pp;
namespace tp = accel::parallel::tp;

namespace {

constexpr int kSteps = 20, kAccum = 2, kRows = 4, kSeq = 8, kVocab = 37;

const char *const kFullShard = R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": )"
                               R"("TRANSFORMER_BASED_WRAP", "transformer_cls_names_to_wrap": ["gpt_block"]})";

std::string gpt_json(int64_t layers, bool tied)
{
    return std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_head": 4, "n_layer": )") +
           std::to_string(layers) + ", \"tie_word_embeddings\": " + (tied ? "true" : "false") + "}";
}

struct Layout {
    std::string schedule = "gpipe";
    int32_t pp = 2, tp = 1, cp = 1, shard = 2, replicas = 1;
    std::string cp_strategy = "alltoall"; // or "allgather", or "ulysses" (sp_size)
    std::string plugin = kFullShard;      // the accelerator config's sharding plugin
    int64_t layers = 4, micro = 2;
    int32_t chunks = 1; // > 1: interleaved, that many chunks per stage
    bool tied = true, sequence_parallel = false;
    std::string json; // the model's spec (a llama's); empty: gpt_json(layers, tied)
    std::string describe() const
    {
        return schedule + ", pp " + std::to_string(pp) + " x tp " + std::to_string(tp) + " x cp " + std::to_string(cp) +
               " (" + cp_strategy + ") x dp_replicate " + std::to_string(replicas) + " x dp_shard " + std::to_string(shard) +
               (sequence_parallel ? " (sequence parallel)" : "") + ", " + (tied ? "tied" : "untied") + ", " + plugin;
    }
};

// eps 1e-6 as in the pipeline's own tests: the key bias's gradient is rounding noise, which the default eps would
// turn into full-size steps of opposite signs on the two sides.
torch::optim::AdamW adamw(const std::vector<at::Tensor> &params)
{
    return torch::optim::AdamW(params, torch::optim::AdamWOptions(3e-3).weight_decay(0.01).eps(1e-6));
}

struct Reference {
    std::vector<double> losses, norms;
};

Reference train_one_process(accel::Model &ref, const at::Tensor &ids, const at::Tensor &labels, double clip)
{
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto opt = adamw(ref.parameters());
    Reference out;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kAccum; ++k) {
            at::Tensor loss = accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]);
            out.losses.push_back(loss.item<double>());
            (loss / static_cast<double>(kAccum)).backward();
        }
        out.norms.push_back(accel::parallel::whole_clip_grad_norm(ref.parameters(), clip, 2.0, true));
        opt.step();
        opt.zero_grad();
    }
    return out;
}

using accel_test::check_weights;

void check_training(const Layout &l)
{
    SCOPED_TRACE(l.describe() + " " + l.json);
    const std::string json = l.json.empty() ? gpt_json(l.layers, l.tied) : l.json;
    const accel::config::ShardingConfig sharding = accel::config::parse_accelerator_config(("{" + l.plugin + "}").c_str()).sharding;
    const int32_t dp = l.replicas * l.shard, world = l.pp * l.tp * l.cp * dp;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= world; ++r) { // the same seed: every rank starts from one process's weights
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json.c_str()));
        models.back()->train(false); // no dropout
    }
    constexpr double kClip = 0.05;
    at::manual_seed(42);
    const at::Tensor ids = at::randint(0, kVocab, {kSteps, kAccum, kRows, kSeq}, at::kLong);
    const at::Tensor labels = at::randint(0, kVocab, {kSteps, kAccum, kRows, kSeq}, at::kLong);
    auto &ref = *models.back();
    const Reference want = train_one_process(ref, ids, labels, kClip);

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(l.replicas, l.shard, l.cp, l.tp, l.pp), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const int64_t rows = kRows / dp, first_row = mesh.rank_in(dist::MeshDim::Dp) * rows; // this rank's share
        accel::config::ParallelismConfig config;
        config.pp_size = l.pp;
        config.tp_size = l.tp;
        config.dp_replicate_size = l.replicas;
        config.dp_shard_size = l.shard;
        config.pp_schedule = l.schedule;
        config.num_micro_batches = static_cast<int32_t>(l.micro);
        config.sequence_parallel = l.sequence_parallel;
        if (l.chunks > 1) config.num_virtual_stages_per_pipeline_rank = l.chunks;
        if (l.cp > 1) cp::prepare_context_parallel(m, mesh, l.cp_strategy); // before the pipeline, as prepare does
        auto pipeline = pp::prepare_pipeline(m, mesh, config, nullptr, &sharding);
        accel::parallel::ShardedDataParallel *engine = pipeline->sharded();
        ASSERT_NE(engine, nullptr);
        if (sharding.activation_checkpointing) m.set_activation_checkpointing(engine->checkpointed_layers()); // as prepare
        auto opt = adamw(engine->optimizer_params());
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
                // Each data-parallel rank reports its rows' loss (as many tokens each): their mean is the batch's.
                at::Tensor mean = at::full({1}, got, at::kDouble);
                mesh.group(dist::MeshDim::Dp)->allreduce(mean, dist::ReduceOp::Sum);
                const double expected = want.losses[static_cast<size_t>(s * kAccum + k)];
                EXPECT_NEAR(mean.item<double>() / dp, expected, 1e-5 * expected) << "step " << s << " rank " << comm->rank();
            }
            const double norm = pipeline->clip_grad_norm(kClip, 2.0, true);
            const double expected = want.norms[static_cast<size_t>(s)];
            EXPECT_NEAR(norm, expected, 1e-5 * expected) << "step " << s << " rank " << comm->rank();
            opt.step();
            engine->after_optimizer_step(); // the shards' gradients are views of the engine's buffers: it drops them
            engine->zero_grad();
        }
        engine->summon_full_params(true);
        check_weights(m, ref, mesh, l.tp, comm->rank());
        engine->summon_full_params(false);
    });
}

// pp 2 x tp 2 x dp_shard 2 (8 ranks): each stage split by its tp plan, each rank's slices sharded over the stage's
// two dp processes. FSDP FULL_SHARD under GPipe (tied head: the vocabulary-parallel embedding's gradient exchanged
// between the first and last stage's same tp rank before the reduction), ZeRO-3 under 1F1B with sequence
// parallelism and an untied head, ZeRO-2 and ZeRO-1 (every rank's full gradients) under 1F1B, and FULL_SHARD with
// activation checkpointing (each split block recomputed in its backward, gathered again for it) interleaved.
TEST(PipelineMesh, TensorParallelTimesShardsEqualsOneProcess)
{
    Layout l;
    l.tp = 2;
    check_training(l);
    l.schedule = "1f1b";
    l.sequence_parallel = true;
    l.tied = false;
    l.layers = 3;
    l.plugin = R"("deepspeed_plugin": {"zero_stage": 3})";
    check_training(l);
}

TEST(PipelineMesh, TensorParallelTimesOtherShardingsEqualsOneProcess)
{
    Layout l;
    l.tp = 2;
    l.schedule = "1f1b";
    l.plugin = R"("deepspeed_plugin": {"zero_stage": 2})";
    check_training(l);
    l.schedule = "gpipe";
    l.plugin = R"("deepspeed_plugin": {"zero_stage": 1})";
    check_training(l);
    l.schedule = "interleaved_1f1b";
    l.chunks = 2;
    l.plugin = R"("fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "activation_checkpointing": true, )"
               R"("auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "transformer_cls_names_to_wrap": ["gpt_block"]})";
    check_training(l);
}

// pp 2 x cp 2 x dp_shard 2 (8 ranks): each stage's attention over its cp group, its parameters sharded over the
// stage's dp_shard_cp group (4 ranks: the two shards' two cp ranks), gradients averaged over dp_cp. Ring attention
// under FSDP and 1F1B, all-gathered K/V under ZeRO-3 and GPipe with an untied head; ZeRO-1 (every rank's full
// gradients) with a tied head: over 4 ranks the last stage takes the first's reduced embedding gradient
// (align_tied_gradient; over Gloo the two layouts' sums round apart, distributed.pp_zero3_cp_gloo_8 checks the copies
// bit for bit).
TEST(PipelineMesh, ContextParallelTimesShardsEqualsOneProcess)
{
    Layout l;
    l.cp = 2;
    l.schedule = "1f1b";
    check_training(l);
    l.plugin = R"("deepspeed_plugin": {"zero_stage": 1})";
    check_training(l);
    l.schedule = "gpipe";
    l.cp_strategy = "allgather";
    l.tied = false;
    l.layers = 3;
    l.plugin = R"("deepspeed_plugin": {"zero_stage": 3})";
    check_training(l);
}

// pp 2 x sp 2 x dp_shard 2: Ulysses' all-to-all on the same mesh axis, under FSDP; and pp 2 x sp 2 x tp 2, the
// engine sharding each tp slice over the sp group alone (dp_shard_cp with dp_shard 1).
TEST(PipelineMesh, UlyssesTimesShardsEqualsOneProcess)
{
    Layout l;
    l.cp = 2;
    l.cp_strategy = "ulysses";
    check_training(l);
    l.tp = 2;
    l.shard = 1;
    check_training(l);
}

// 16 ranks: HSDP with a split stage (pp 2 x dp_replicate 2 x dp_shard 2 x tp 2, one row each, one micro-batch),
// and every dimension but dp_replicate at once (pp 2 x dp_shard 2 x cp 2 x tp 2: each stage's 4 tp slices'
// owners shard over dp_shard_cp).
TEST(PipelineMesh, SixteenRanksEqualOneProcess)
{
    Layout l;
    l.tp = 2;
    l.replicas = 2;
    l.micro = 1;
    l.schedule = "1f1b";
    check_training(l);
    l.replicas = 1;
    l.micro = 2;
    l.cp = 2;
    check_training(l);
}

// A llama (grouped-query attention, rotary embedding) under ZeRO-3: pp 2 x tp 2 x dp_shard 2, pp 2 x cp 2 x dp_shard 2.
TEST(PipelineMesh, LlamaEqualsOneProcess)
{
    Layout l;
    l.plugin = R"("deepspeed_plugin": {"zero_stage": 3})";
    l.json = accel_test::llama_json(4, true);
    l.tp = 2;
    check_training(l);
    l.tp = 1;
    l.cp = 2;
    l.schedule = "1f1b";
    l.json = accel_test::llama_json(4, false);
    check_training(l);
}

} // namespace
