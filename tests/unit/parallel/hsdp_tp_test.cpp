// Issue 33's 8-rank mesh: dp_replicate 2 x dp_shard 2 x tp 2 (HSDP + TP: fsdp_plugin FULL_SHARD over dp_shard, the
// shard groups' replicas linked over dp_replicate, each rank's tp slices what the engine shards), on 8 ranks played
// by threads, as the accelerator prepares it (tp::apply_plan, then the engine with set_tensor_parallel). 20 AdamW
// steps with accumulation 2 and clipping on a tiny gpt, each of the 4 data-parallel ranks taking its row of the
// global batch (the two ranks of a tp group the same row): the parameters, gathered over dp_shard, equal one
// process's on the whole batch, cut to each rank's tp slices, within 1e-5 relative (float32). One process of the
// mesh per thread keeps it to about a second, where 8 Gloo processes would take ~10 s of CI.
#include "config/accelerator_config.hpp"
#include "config/sharding_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/whole_gradients.hpp"
#include "precision/autocast.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

const char *const kGpt = R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_layer": 2, "n_head": 4,
    "attn_pdrop": 0, "resid_pdrop": 0, "embd_pdrop": 0})";

// The largest difference of `got` from `want` relative to max(1, |want|max), over `what`.
void expect_close(const at::Tensor &got, const at::Tensor &want, const std::string &what)
{
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    const double tol = 1e-5 * std::max(1.0, want.abs().max().item<double>());
    const double diff = (got - want).abs().max().item<double>();
    EXPECT_LE(diff, tol) << what << ": max difference " << diff;
}

} // namespace

TEST(HsdpTensorParallel, ReplicateShardTpEqualsOneProcess)
{
    constexpr int32_t kReplicate = 2, kShard = 2, kTp = 2, kWorld = kReplicate * kShard * kTp, kDp = kReplicate * kShard;
    constexpr int kSteps = 20, kMicro = 2;
    constexpr int64_t kT = 8;
    // float32: AdamW divides each update by the gradient's running RMS, so the split's reordered sums show as
    // differences of up to lr on near-zero gradients; at lr 1e-3 they stay below the tolerance (as in the cp tests).
    constexpr double kClip = 0.05, kLr = 1e-3;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= kWorld; ++r) { // the ranks' and, last, one process's: the same weights
        at::manual_seed(91);
        models.push_back(accel::make_model_from_json(kGpt));
        models.back()->train(false);
    }
    at::manual_seed(92);
    const at::Tensor ids = at::randint(0, 37, {kSteps, kMicro, kDp, kT}, at::kLong);
    const at::Tensor labels = at::randint(0, 37, {kSteps, kMicro, kDp, kT}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto adamw = [&](const std::vector<at::Tensor> &params) {
        return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.01));
    };
    auto &ref = *models.back();
    auto ref_opt = adamw(ref.parameters());
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kMicro; ++k) (accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]) / kMicro).backward();
        accel::parallel::whole_clip_grad_norm(ref.parameters(), kClip, 2.0, true);
        ref_opt.step();
        ref_opt.zero_grad();
    }
    const accel::config::ShardingConfig cfg = accel::config::parse_accelerator_config(
        R"({"fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_cls_names_to_wrap": ["gpt_block"]}})").sharding;
    dist::run_on_threads(kWorld, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(kReplicate, kShard, 1, kTp), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        const std::vector<at::Tensor> split = tp::apply_plan(m, mesh);
        accel::parallel::ShardedDataParallel engine(m, mesh, cfg);
        engine.set_tensor_parallel(mesh.group(dist::MeshDim::Tp), split);
        auto opt = adamw(engine.optimizer_params());
        const int64_t row = mesh.rank_in(dist::MeshDim::Dp); // the tp group's row of the global batch
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kMicro; ++k) {
                engine.set_require_sync(k == kMicro - 1);
                at::Tensor logits = accel::forward(m, ids[s][k].narrow(0, row, 1), true);
                (accel::compute_loss(causal, logits, labels[s][k].narrow(0, row, 1)) / kMicro).backward();
                engine.finish_backward();
            }
            engine.clip_grad_norm(kClip, 2.0, true);
            opt.step();
            engine.after_optimizer_step();
            engine.zero_grad();
        }
        engine.summon_full_params(true); // whole over dp_shard: this rank's tp slices
        const auto &slicing = dynamic_cast<tp::TensorParallelModel &>(m).tensor_parallel_slicing();
        const int32_t tp_rank = mesh.rank_in(dist::MeshDim::Tp);
        EXPECT_FALSE(slicing.empty());
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second;
            auto it = slicing.find(name);
            const at::Tensor want = it == slicing.end() ? whole : tp::slice_parameter(whole, it->second, tp_rank, kTp);
            expect_close(p.detach(), want.detach(), name + " (rank " + std::to_string(comm->rank()) + ")");
        }
        engine.summon_full_params(false);
    });
}
