// Context parallelism (src/parallel/context_parallel) on 2 and 4 ranks played by threads: the sequence layout
// (chunks r and 2cp-1-r), attention over the split sequence under both strategies ("allgather": K/V gathered;
// "alltoall": ring attention; sliding windows too) against one process's causal attention with its input gradients,
// and GPT training (20 AdamW steps, accumulation 2, clipping, DDP over dp_cp as prepare builds it, also inside
// tensor parallelism) equal to one process on the same global batch; Ulysses (sp_size: all-to-all to head shards)
// the same.
#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "config/sharding_config.hpp"
#include "model/model.hpp"
#include "data_loader/dataset.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "model/generation.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/context_parallel/attention.hpp"
#include "parallel/context_parallel/plan.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/ddp.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/whole_gradients.hpp"
#include "precision/autocast.hpp"
#include "parallel_test_support.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace cp = accel::parallel::cp;
namespace tp = accel::parallel::tp;

namespace {

using namespace accel_test;

TEST(ContextParallelSequence, LoadBalancedChunksAndPositions)
{
    at::Tensor x = at::arange(16, at::kLong).view({1, 16});
    // cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    EXPECT_TRUE(at::equal(cp::shard_sequence(x, 1, 0, 2), at::tensor({0, 1, 2, 3, 12, 13, 14, 15}, at::kLong).view({1, 8})));
    EXPECT_TRUE(at::equal(cp::shard_sequence(x, 1, 1, 2), at::tensor({4, 5, 6, 7, 8, 9, 10, 11}, at::kLong).view({1, 8})));
    for (int32_t n : {2, 4}) {
        std::vector<at::Tensor> parts;
        for (int32_t r = 0; r < n; ++r) {
            parts.push_back(cp::shard_sequence(x, 1, r, n));
            // The positions are the tokens' places in the whole sequence (here the tokens themselves).
            EXPECT_TRUE(at::equal(cp::sequence_positions(16 / n, r, n, at::TensorOptions()), parts.back()[0]));
        }
        EXPECT_TRUE(at::equal(cp::unshard_sequence(parts, 1), x));
    }
    try {
        cp::check_sequence_length(12, 4, "batch: inputs");
        ADD_FAILURE() << "12 tokens accepted on cp 4";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("batch: inputs: a sequence of 12 tokens does not split into 2 x cp_size = 8"),
                  std::string::npos)
            << e.what();
    }
}

// softmax(mask(q kᵀ · scale)) v over the whole sequence, as one process computes it; a sliding window hides the
// keys `window` or more positions back (transformers' Mistral: j <= i - window).
at::Tensor whole_attention(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, double scale, bool causal,
                           int64_t window = 0)
{
    at::Tensor s = at::matmul(q, k.transpose(-1, -2)) * scale;
    const int64_t t = q.size(2);
    const at::Tensor ones = at::ones({t, t}, q.options().dtype(at::kBool));
    if (causal) s = s.masked_fill(ones.triu(1), -std::numeric_limits<double>::infinity());
    if (window > 0) s = s.masked_fill(ones.tril(-window), -std::numeric_limits<double>::infinity());
    return at::matmul(at::softmax(s, -1), v);
}

// cp::attention with `strategy` on n thread ranks, each given its sequence shards of q, k, v: every rank's
// output and input gradients equal its shards of the whole computation's (`want`, and the gradients that
// want.backward(gy) left in rq, rk, rv).
void expect_shards_equal_whole(int32_t n, cp::Strategy strategy, const at::Tensor &q, const at::Tensor &k,
                               const at::Tensor &v, const at::Tensor &gy, const at::Tensor &want, const at::Tensor &rq,
                               const at::Tensor &rk, const at::Tensor &rv, const cp::AttentionSpec &spec,
                               const std::string &what, double tol = 1e-12)
{
    dist::run_on_threads(n, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        cp::ContextParallel c{comm, strategy};
        auto part = [&](const at::Tensor &t) { return cp::shard_sequence(t, 2, r, n).clone().requires_grad_(true); };
        at::Tensor lq = part(q), lk = part(k), lv = part(v);
        at::Tensor y = cp::attention(c, lq, lk, lv, spec);
        expect_close(y, cp::shard_sequence(want, 2, r, n), what + " output", tol);
        y.backward(cp::shard_sequence(gy, 2, r, n));
        expect_close(lq.grad(), cp::shard_sequence(rq.grad(), 2, r, n), what + " dq", tol);
        expect_close(lk.grad(), cp::shard_sequence(rk.grad(), 2, r, n), what + " dk", tol);
        expect_close(lv.grad(), cp::shard_sequence(rv.grad(), 2, r, n), what + " dv", tol);
    });
}

// T = 8 x n: chunks of 4 positions. float64 within 1e-12 (the split is exact), float32 within 1e-5.
void check_attention(int32_t n, cp::Strategy strategy, bool causal, int64_t window = 0, at::ScalarType dtype = at::kDouble)
{
    at::manual_seed(5);
    const int64_t B = 2, H = 3, T = 8 * n, D = 4;
    cp::AttentionSpec spec;
    spec.scale = 0.37;
    spec.causal = causal;
    spec.window = window;
    at::Tensor q = at::randn({B, H, T, D}, dtype), k = at::randn({B, H, T, D}, dtype),
               v = at::randn({B, H, T, D}, dtype), gy = at::randn({B, H, T, D}, dtype);
    at::Tensor rq = q.clone().requires_grad_(true), rk = k.clone().requires_grad_(true), rv = v.clone().requires_grad_(true);
    at::Tensor want = whole_attention(rq, rk, rv, spec.scale, causal, window);
    want.backward(gy);
    const std::string what = std::string(cp::strategy_name(strategy)) + (causal ? " causal" : " full") + " window " +
                             std::to_string(window) + " " + c10::toString(dtype) + " on cp " + std::to_string(n);
    expect_shards_equal_whole(n, strategy, q, k, v, gy, want, rq, rk, rv, spec, what, dtype == at::kDouble ? 1e-12 : 1e-5);
}

TEST(ContextParallelAttention, BothStrategiesEqualOneProcess)
{
    for (int32_t n : {2, 3, 4})
        for (auto s : {cp::Strategy::AllGather, cp::Strategy::Ring})
            for (bool causal : {true, false}) check_attention(n, s, causal);
}

// Mistral's sliding window under both strategies: windows of 1 (each query its own key), inside a chunk (3),
// a chunk (4), between a chunk and T (6, 10, T - 6: a block seen by some rows and wholly hidden from others, merged
// before the diagonal when the ring did not order them), T - 1, T and beyond; cp 2 and cp 4, causal (the models'
// case) and not (the window alone), float64 and float32.
TEST(ContextParallelAttention, SlidingWindowEqualsOneProcess)
{
    for (int32_t n : {2, 4}) {
        const int64_t T = 8 * n;
        for (int64_t w : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{6}, int64_t{10}, T - 6, T - 1, T, T + 5})
            for (auto s : {cp::Strategy::AllGather, cp::Strategy::Ring})
                for (bool causal : {true, false}) check_attention(n, s, causal, w);
        for (int64_t w : {int64_t{3}, int64_t{6}, T})
            for (auto s : {cp::Strategy::AllGather, cp::Strategy::Ring}) check_attention(n, s, true, w, at::kFloat);
    }
}

// The ring on n thread ranks, each drawing its dropout seed from a generator of its own seeded `seed`: the whole
// output and q, k, v gradients (after backward(gy)), unsharded.
struct RingRun {
    at::Tensor y, dq, dk, dv;
};
RingRun run_ring(int32_t n, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &gy,
                 const cp::AttentionSpec &base, uint64_t seed)
{
    std::vector<std::vector<at::Tensor>> parts(4, std::vector<at::Tensor>(static_cast<size_t>(n)));
    dist::run_on_threads(n, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        cp::ContextParallel c{comm, cp::Strategy::Ring};
        cp::AttentionSpec spec = base;
        spec.generator = at::make_generator<at::CPUGeneratorImpl>(seed);
        auto part = [&](const at::Tensor &t) { return cp::shard_sequence(t, 2, r, n).clone().requires_grad_(true); };
        at::Tensor lq = part(q), lk = part(k), lv = part(v);
        at::Tensor y = cp::attention(c, lq, lk, lv, spec);
        y.backward(cp::shard_sequence(gy, 2, r, n));
        const auto i = static_cast<size_t>(r);
        parts[0][i] = y.detach(), parts[1][i] = lq.grad(), parts[2][i] = lk.grad(), parts[3][i] = lv.grad();
    });
    return {cp::unshard_sequence(parts[0], 2), cp::unshard_sequence(parts[1], 2), cp::unshard_sequence(parts[2], 2),
            cp::unshard_sequence(parts[3], 2)};
}

// Attention dropout (p 0.3) under the ring while training. No one-process mask exists to compare with, so the
// test reads the ring's masks off its output: with q = k = 0 every key a row sees weighs 1 / (the keys it sees),
// and with v one-hot over whole-sequence positions, output [i, j] = that weight x mask [i, j] / keep. Then a call
// from the same seed on random q, k, v equals one process's attention with those masks, output and q, k, v
// gradients within 1e-12 (backward drew the same masks again); the keep rate is 0.7 (within 0.05 over 816 to
// 3168 weights), hidden keys stay hidden, a second call from the seed draws the same masks, and another seed or
// stream (a tp rank's) others.
void check_ring_dropout(int32_t n, int64_t window)
{
    const int64_t B = 2, H = 3, T = 8 * n, D = 4;
    const double keep = 0.7;
    cp::AttentionSpec spec;
    spec.scale = 0.37;
    spec.window = window;
    spec.dropout = 1.0 - keep;
    spec.train = true;
    const at::Tensor pos = at::arange(T, at::kLong), distance = pos.unsqueeze(1) - pos.unsqueeze(0);
    const at::Tensor visible = window > 0 ? (distance >= 0) & (distance < window) : distance >= 0;
    const at::Tensor weight = visible.to(at::kDouble) / visible.sum(1, true).to(at::kDouble);
    const at::Tensor none = at::zeros({B, H, T, T}, at::kDouble), onehot = at::eye(T, at::kDouble).expand({B, H, T, T});
    const std::string what = "ring dropout on cp " + std::to_string(n) + " window " + std::to_string(window);
    const at::Tensor kept = run_ring(n, none, none, onehot, none, spec, 21).y != 0;
    const at::Tensor probe = run_ring(n, none, none, onehot, none, spec, 21).y;
    expect_close(probe, kept.to(at::kDouble) * weight / keep, what + ": the kept weights scaled by 1 / keep", 1e-12);
    EXPECT_EQ((kept & ~visible).sum().item<int64_t>(), 0) << what << ": a hidden key kept";
    const double rate = kept.sum().item<double>() / static_cast<double>(B * H * visible.sum().item<int64_t>());
    EXPECT_NEAR(rate, keep, 0.05) << what;
    EXPECT_FALSE(at::equal(run_ring(n, none, none, onehot, none, spec, 22).y != 0, kept)) << what << ": seed 22's masks";
    cp::AttentionSpec other_heads = spec; // another tp rank's heads: the same seed, another stream
    other_heads.stream = 2719;
    EXPECT_FALSE(at::equal(run_ring(n, none, none, onehot, none, other_heads, 21).y != 0, kept)) << what << ": stream 2719's masks";

    at::manual_seed(7);
    at::Tensor q = at::randn({B, H, T, D}, at::kDouble), k = at::randn({B, H, T, D}, at::kDouble),
               v = at::randn({B, H, T, D}, at::kDouble), gy = at::randn({B, H, T, D}, at::kDouble);
    at::Tensor rq = q.clone().requires_grad_(true), rk = k.clone().requires_grad_(true), rv = v.clone().requires_grad_(true);
    at::Tensor s = (at::matmul(rq, rk.transpose(-1, -2)) * spec.scale).masked_fill(~visible, -std::numeric_limits<double>::infinity());
    at::Tensor want = at::matmul(at::softmax(s, -1) * kept.to(at::kDouble) / keep, rv);
    want.backward(gy);
    const RingRun got = run_ring(n, q, k, v, gy, spec, 21);
    expect_close(got.y, want, what + " output", 1e-12);
    expect_close(got.dq, rq.grad(), what + " dq", 1e-12);
    expect_close(got.dk, rk.grad(), what + " dk", 1e-12);
    expect_close(got.dv, rv.grad(), what + " dv", 1e-12);
}

TEST(ContextParallelAttention, RingDropoutMasksReplayInBackward)
{
    check_ring_dropout(2, 0);
    check_ring_dropout(2, 6);
    check_ring_dropout(4, 0);
    check_ring_dropout(4, 10);
}

// Attention dropout under the ring in the models (was refused): gpt (attn_pdrop) and llama (attention_dropout) at
// 0.5 under cp 2 "alltoall", alone and inside tp 2 (each tp rank's stream), in training mode: the forward differs
// from the evaluation forward (the masks act) and every gradient is finite. The masks themselves:
// RingDropoutMasksReplayInBackward.
TEST(ContextParallelAttention, ModelsTrainWithRingDropout)
{
    const char *gpt = R"({"type": "gpt", "vocab_size": 37, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 4,
        "attn_pdrop": 0.5, "resid_pdrop": 0.0, "embd_pdrop": 0.0})";
    const char *llama = R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16,
        "attention_dropout": 0.5})";
    for (const char *json : {gpt, llama})
        for (int32_t tpn : {1, 2}) {
            std::vector<std::shared_ptr<accel::Model>> models;
            for (int32_t r = 0; r < 2 * tpn; ++r) {
                at::manual_seed(31);
                models.push_back(accel::make_model_from_json(json));
            }
            at::manual_seed(32);
            const at::Tensor ids = at::randint(0, 37, {2, 16}, at::kLong);
            dist::run_on_threads(2 * tpn, [&](const std::shared_ptr<dist::Communicator> &comm) {
                dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, tpn), comm);
                auto &m = *models[static_cast<size_t>(comm->rank())];
                cp::prepare_context_parallel(m, mesh, "alltoall");
                const auto wrapper =
                    tpn > 1 ? tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{}) : nullptr;
                const at::Tensor part = cp::shard_sequence(ids, 1, mesh.rank_in(dist::MeshDim::Cp), 2);
                m.train(false);
                const at::Tensor eval = m.forward(part).detach();
                m.train(true);
                const at::Tensor y = m.forward(part);
                const std::string what = std::string(json) + " tp " + std::to_string(tpn);
                EXPECT_FALSE(at::allclose(y, eval)) << what << ": no dropout in training";
                y.pow(2).mean().backward();
                if (wrapper) wrapper->finish_backward();
                for (const auto &[name, p] : m.named_parameters())
                    EXPECT_TRUE(p.grad().defined() && at::isfinite(p.grad()).all().item<bool>()) << what << ": " << name;
            });
        }
}

TEST(ContextParallelAttention, RefusesAnUnknownStrategy) { EXPECT_THROW(cp::parse_strategy("ring"), accel::Error); }

// Ulysses (sp_size): all-to-all to head shards, attention over whole sequences, all-to-all back. Outputs and
// input gradients equal one process's, also with grouped key/value heads (k, v with H / g heads), on 2, 3
// (not a power of two: the pairwise exchange's order) and 4 ranks.
void check_ulysses_attention(int32_t n, int64_t H, int64_t KV, bool causal)
{
    at::manual_seed(6);
    const int64_t B = 2, T = 4 * n, D = 3, g = H / KV;
    const double scale = 0.41;
    at::Tensor q = at::randn({B, H, T, D}, at::kDouble), k = at::randn({B, KV, T, D}, at::kDouble),
               v = at::randn({B, KV, T, D}, at::kDouble), gy = at::randn({B, H, T, D}, at::kDouble);
    at::Tensor rq = q.clone().requires_grad_(true), rk = k.clone().requires_grad_(true), rv = v.clone().requires_grad_(true);
    at::Tensor want = whole_attention(rq, rk.repeat_interleave(g, 1), rv.repeat_interleave(g, 1), scale, causal);
    want.backward(gy);
    const std::string what = "ulysses " + std::to_string(H) + "/" + std::to_string(KV) + " heads" +
                             (causal ? " causal" : " full") + " on sp " + std::to_string(n);
    cp::AttentionSpec spec;
    spec.scale = scale;
    spec.causal = causal;
    expect_shards_equal_whole(n, cp::Strategy::Ulysses, q, k, v, gy, want, rq, rk, rv, spec, what);
}

TEST(ContextParallelUlysses, AttentionEqualsOneProcess)
{
    for (bool causal : {true, false}) {
        check_ulysses_attention(2, 4, 4, causal);
        check_ulysses_attention(2, 4, 2, causal);
        check_ulysses_attention(3, 6, 3, causal);
        check_ulysses_attention(4, 8, 4, causal);
    }
}

TEST(ContextParallelUlysses, HeadsMustDivideBySpSize)
{
    // At prepare, by the config's name; in attention (e.g. a tensor-parallel rank's heads), by the shapes.
    auto refused = [](const char *json, const char *key) {
        auto m = accel::make_model_from_json(json);
        dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
            dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 1), comm);
            if (comm->rank() != 0) return;
            try {
                cp::prepare_context_parallel(*m, mesh, "ulysses");
                ADD_FAILURE() << key << " not divisible by sp_size accepted";
            } catch (const accel::Error &e) {
                EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
                EXPECT_NE(std::string(e.what()).find(std::string(key) + " (3) does not divide by parallelism_config.sp_size (2)"),
                          std::string::npos) << e.what();
            }
        });
    };
    refused(R"({"type": "gpt", "vocab_size": 8, "n_positions": 8, "n_embd": 6, "n_layer": 1, "n_head": 3})", "n_head");
    refused(R"({"type": "llama", "vocab_size": 8, "hidden_size": 12, "intermediate_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 6, "num_key_value_heads": 3, "max_position_embeddings": 8})", "num_key_value_heads");
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        cp::ContextParallel c{comm, cp::Strategy::Ulysses};
        at::Tensor q = at::randn({1, 3, 4, 2});
        try {
            cp::attention(c, q, q, q, cp::AttentionSpec{});
            ADD_FAILURE() << "3 heads accepted on sp 2";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(e.what()).find("has 3 heads"), std::string::npos) << e.what();
        }
    });
}

// GPT training on a mesh (dp_replicate 1 x cp x tp) as prepare builds it: the cp plan, then tensor
// parallelism's wrapper (DDP over dp_cp inside) or DDP over dp_cp. 20 AdamW steps, accumulation 2 (the first
// micro-batch unsynchronised), clipping to a norm the gradients exceed; some labels ignored (-100), unevenly
// over the ranks. The reported loss, the clipped norm and every parameter equal one process's.
const char *const kGpt = R"({"type": "gpt", "vocab_size": 37, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 4})";

void check_training(int32_t cpn, int32_t tpn, cp::Strategy strategy, at::ScalarType dtype, const char *json = kGpt,
                    int64_t T = 16)
{
    // float32: AdamW divides each update by the gradient's running RMS, which turns float32 rounding in the
    // sums (the split reorders them) into differences of up to lr on near-zero gradients; at lr 1e-3 they stay
    // under the tolerance. float64 shows the computation itself is exact, at AdamW's usual lr 1e-2.
    const bool f32 = dtype == at::kFloat;
    const double kLr = f32 ? 1e-3 : 1e-2, tol = f32 ? 1e-5 : 1e-10;
    const int32_t world = cpn * tpn;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= world; ++r) {
        at::manual_seed(31);
        models.push_back(accel::make_model_from_json(json));
        models.back()->train(false); // no dropout
        if (dtype != at::kFloat) {
            at::NoGradGuard no_grad;
            for (at::Tensor p : models.back()->parameters()) p.set_data(p.to(dtype));
        }
    }
    constexpr int kSteps = 20, kMicro = 2;
    constexpr double kClip = 0.05;
    at::manual_seed(32);
    at::Tensor ids = at::randint(0, 37, {kSteps, kMicro, 2, T}, at::kLong);
    at::Tensor labels = at::randint(0, 37, {kSteps, kMicro, 2, T}, at::kLong);
    labels.narrow(3, 0, 3).fill_(-100); // the first three positions (rank 0's chunk) ignored
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto adamw = [&](const std::vector<at::Tensor> &params) {
        return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.01));
    };
    auto &ref = *models.back();
    auto ref_opt = adamw(ref.parameters());
    std::vector<double> ref_norms, ref_losses;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kMicro; ++k) {
            at::Tensor loss = accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]);
            ref_losses.push_back(loss.item<double>());
            (loss / kMicro).backward();
        }
        ref_norms.push_back(accel::parallel::whole_clip_grad_norm(ref.parameters(), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }
    const std::string what = std::string(c10::toString(dtype)) + " " + cp::strategy_name(strategy) + " cp " +
                             std::to_string(cpn) + " x tp " + std::to_string(tpn) + " T " + std::to_string(T);
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, cpn, tpn), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        cp::prepare_context_parallel(m, mesh, cp::strategy_name(strategy));
        std::shared_ptr<accel::parallel::ParallelWrapper> wrapper =
            tpn > 1 ? tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{})
                    : std::make_shared<accel::parallel::DistributedDataParallel>(
                          m.named_parameters(), m.named_buffers(), mesh.group(dist::MeshDim::DpCp),
                          accel::config::DistributedDataParallelKwargs{});
        auto opt = adamw(m.parameters());
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kMicro; ++k) {
                wrapper->set_require_sync(k == kMicro - 1);
                accel::Batch b;
                b.inputs = ids[s][k];
                b.labels = labels[s][k];
                cp::split_batch(b, mesh); // what the prepared loader yields on this rank
                const int64_t multiple = 2 * cpn; // padded to it (labels -100)
                EXPECT_EQ(b.inputs.size(1), (T + multiple - 1) / multiple * multiple / cpn);
                at::Tensor loss = accel::compute_loss(causal, m.forward(b.inputs), b.labels);
                EXPECT_NEAR(loss.item<double>(), ref_losses[static_cast<size_t>(s * kMicro + k)], tol) << what << " step " << s;
                (loss / kMicro).backward();
                wrapper->finish_backward();
            }
            const double norm = wrapper->clip_grad_norm(kClip, 2.0, true);
            EXPECT_NEAR(norm, ref_norms[static_cast<size_t>(s)], tol * ref_norms[static_cast<size_t>(s)]) << what << " step " << s;
            opt.step();
            opt.zero_grad();
        }
        const auto *gpt = dynamic_cast<accel::GptModel *>(&m);
        const std::map<std::string, tp::ParameterSlicing> none;
        const auto &plan = gpt != nullptr ? gpt->tensor_parallel_slicing() : none;
        const int32_t t = mesh.rank_in(dist::MeshDim::Tp);
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second;
            auto it = plan.find(name);
            at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, t, tpn);
            expect_close(p, mine, what + ": " + name + " after training (rank " + std::to_string(comm->rank()) + ")",
                         tol * std::max(1.0, whole.abs().max().item<double>()));
        }
    });
}

TEST(ContextParallelGpt, TrainingEqualsOneProcess)
{
    for (auto dtype : {at::kFloat, at::kDouble})
        for (auto s : {cp::Strategy::AllGather, cp::Strategy::Ring}) {
            check_training(2, 1, s, dtype);
            check_training(4, 1, s, dtype);
            check_training(2, 2, s, dtype);
        }
}

// cp inside the sharding engine (fsdp_plugin FULL_SHARD, one unit per block): the engine shards over dp_shard_cp and
// averages gradients over dp_cp. cp 2 alone (the shards over the cp group) and dp_shard 2 x cp 2, both strategies,
// 20 AdamW steps with accumulation 2 and clipping: parameters (gathered) equal one process's within 1e-5 (float32).
void check_fsdp_training(int32_t shard, int32_t cpn, cp::Strategy strategy)
{
    const int32_t world = shard * cpn;
    const int64_t T = 16;
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= world; ++r) {
        at::manual_seed(31);
        models.push_back(accel::make_model_from_json(kGpt));
        models.back()->train(false);
    }
    constexpr int kSteps = 20, kMicro = 2;
    constexpr double kClip = 0.05, kLr = 1e-3;
    at::manual_seed(33);
    at::Tensor ids = at::randint(0, 37, {kSteps, kMicro, 2, T}, at::kLong);
    at::Tensor labels = at::randint(0, 37, {kSteps, kMicro, 2, T}, at::kLong);
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
    const std::string what = std::string("fsdp ") + cp::strategy_name(strategy) + " dp_shard " + std::to_string(shard) +
                             " x cp " + std::to_string(cpn);
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, shard, cpn, 1), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        cp::prepare_context_parallel(m, mesh, cp::strategy_name(strategy));
        accel::parallel::ShardedDataParallel engine(m, mesh, cfg);
        auto opt = adamw(engine.optimizer_params());
        const int64_t rows = 2 / shard, first = mesh.rank_in(dist::MeshDim::Dp) * rows;
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kMicro; ++k) {
                engine.set_require_sync(k == kMicro - 1);
                accel::Batch b;
                b.inputs = ids[s][k].narrow(0, first, rows);
                b.labels = labels[s][k].narrow(0, first, rows);
                cp::split_batch(b, mesh);
                (accel::compute_loss(causal, accel::forward(m, b.inputs, true), b.labels) / kMicro).backward();
                engine.finish_backward();
            }
            engine.clip_grad_norm(kClip, 2.0, true);
            opt.step();
            engine.after_optimizer_step();
            engine.zero_grad(); // the engine's gradients are views of its buffers (as the accelerator's hook does)
        }
        engine.summon_full_params(true);
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second;
            expect_close(p, whole, what + ": " + name + " (rank " + std::to_string(comm->rank()) + ")",
                         1e-5 * std::max(1.0, whole.abs().max().item<double>()));
        }
        engine.summon_full_params(false);
    });
}

// Ulysses (sp_size) with the same training: sp 2 and sp 4, float32 and float64, sp 2 x tp 2.
TEST(ContextParallelUlysses, GptTrainingEqualsOneProcess)
{
    for (auto dtype : {at::kFloat, at::kDouble}) {
        check_training(2, 1, cp::Strategy::Ulysses, dtype);
        check_training(4, 1, cp::Strategy::Ulysses, dtype);
    }
    check_training(2, 2, cp::Strategy::Ulysses, at::kFloat);
}

TEST(ContextParallelFsdp, TrainingEqualsOneProcess)
{
    for (auto s : {cp::Strategy::AllGather, cp::Strategy::Ring}) {
        check_fsdp_training(1, 2, s);
        check_fsdp_training(2, 2, s);
    }
}

// The llama plan: rotary embedding at whole-sequence positions, grouped key/value heads; sliding windows: Mistral's
// 5 positions on every layer (between a chunk and T on cp 2 and cp 4: the ring skips or masks chunk pairs by it)
// under both strategies, and Qwen2's 3 (inside a chunk of 4 on cp 2) on its upper layer only under the ring.
// float32 only: transformers' Llama takes the softmax in float32 whatever the model's dtype, so a float64 model is
// no more exact than float32 (its softmax sums keys in another order under "allgather": differences of 1e-6 after
// 20 AdamW steps).
TEST(ContextParallelLlama, TrainingEqualsOneProcess)
{
    const char *llama = R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16})";
    const char *mistral = R"({"type": "llama", "model_type": "mistral", "vocab_size": 37, "hidden_size": 16,
        "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 16, "sliding_window": 5})";
    for (auto s : {cp::Strategy::AllGather, cp::Strategy::Ring}) {
        check_training(2, 1, s, at::kFloat, llama);
        check_training(4, 1, s, at::kFloat, llama);
        check_training(2, 1, s, at::kFloat, mistral);
    }
    check_training(4, 1, cp::Strategy::Ring, at::kFloat, mistral);
    check_training(2, 1, cp::Strategy::Ring, at::kFloat, R"({"type": "llama", "model_type": "qwen2", "vocab_size": 37,
        "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 16, "use_sliding_window": true, "sliding_window": 3,
        "max_window_layers": 1})");
}

// Ulysses on llama: grouped key/value heads travel unrepeated (8 query, 4 key/value heads: sp 2 and sp 4), the
// sliding window over whole sequences.
TEST(ContextParallelUlysses, LlamaTrainingEqualsOneProcess)
{
    const char *llama = R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 16})";
    const char *mistral = R"({"type": "llama", "model_type": "mistral", "vocab_size": 37, "hidden_size": 16,
        "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 16, "sliding_window": 5})";
    check_training(2, 1, cp::Strategy::Ulysses, at::kFloat, llama);
    check_training(4, 1, cp::Strategy::Ulysses, at::kFloat, llama);
    check_training(2, 1, cp::Strategy::Ulysses, at::kFloat, mistral);
}

// Lengths that are not a multiple of 2 x cp_size: padded at the end (inputs 0, labels -100, mask 0), each rank's
// part laid out as usual; training then equals one process on the unpadded sequence (gpt and llama, cp 2 and
// cp 4 both strategies, Ulysses sp 2).
TEST(ContextParallelPadding, PadsToTheMultiple)
{
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 1), comm);
        const int32_t r = comm->rank();
        accel::Batch b;
        b.inputs = at::arange(1, 7, at::kLong).view({1, 6}); // 6 tokens -> 8 (chunks of 2)
        b.labels = b.inputs + 10;
        b.attention_mask = at::ones({1, 6}, at::kLong);
        cp::split_batch(b, mesh);
        const std::vector<int64_t> inputs = r == 0 ? std::vector<int64_t>{1, 2, 0, 0} : std::vector<int64_t>{3, 4, 5, 6};
        const std::vector<int64_t> labels = r == 0 ? std::vector<int64_t>{11, 12, -100, -100} : std::vector<int64_t>{13, 14, 15, 16};
        EXPECT_TRUE(at::equal(b.inputs, at::tensor(inputs, at::kLong).view({1, 4}))) << b.inputs;
        EXPECT_TRUE(at::equal(b.labels, at::tensor(labels, at::kLong).view({1, 4}))) << b.labels;
        EXPECT_EQ(b.attention_mask.sum().item<int64_t>(), r == 0 ? 2 : 4);
    });
}

TEST(ContextParallelPadding, TrainingEqualsOneProcessUnpadded)
{
    const char *llama = R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16})";
    for (auto s : {cp::Strategy::AllGather, cp::Strategy::Ring}) {
        check_training(2, 1, s, at::kFloat, kGpt, 13);
        check_training(4, 1, s, at::kFloat, kGpt, 11);
        check_training(2, 1, s, at::kFloat, llama, 14);
    }
    check_training(2, 1, cp::Strategy::Ulysses, at::kFloat, kGpt, 13);
    check_training(2, 1, cp::Strategy::Ulysses, at::kFloat, llama, 15);
}

// Generation (the key/value cache path) under cp 2 and Ulysses sp 2: not split, every rank runs the whole prompt
// (5 tokens, not a multiple of anything) and one more token as one process does, and accel's generate gives one
// process's tokens; the training forward afterwards still takes the rank's part and equals one process's.
template <typename M, typename Cache>
void check_generation(const char *json, const char *strategy)
{
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int r = 0; r < 3; ++r) {
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json));
        models.back()->train(false);
    }
    auto &ref = dynamic_cast<M &>(*models[2]);
    at::manual_seed(42);
    at::Tensor prompt = at::randint(0, 37, {2, 5}, at::kLong), next = at::randint(0, 37, {2, 1}, at::kLong);
    at::Tensor whole = at::randint(0, 37, {1, 8}, at::kLong);
    Cache ref_cache;
    at::Tensor want1 = ref.forward_cached(prompt, ref_cache), want2 = ref.forward_cached(next, ref_cache);
    at::Tensor want_whole = ref.forward(whole);
    accel::config::GenerationConfig greedy_config;
    greedy_config.max_new_tokens = 3;
    const at::Tensor greedy = accel::generate(ref, prompt, greedy_config, false);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 1), comm);
        auto &m = dynamic_cast<M &>(*models[static_cast<size_t>(r)]);
        cp::prepare_context_parallel(m, mesh, strategy);
        const std::string what = std::string(strategy) + " rank " + std::to_string(r);
        Cache cache;
        expect_close(m.forward_cached(prompt, cache), want1, what + " prompt", 1e-6);
        expect_close(m.forward_cached(next, cache), want2, what + " next token", 1e-6);
        EXPECT_TRUE(m.context_parallel() != nullptr) << what << ": generation dropped the cp plan";
        expect_close(m.forward(cp::shard_sequence(whole, 1, r, 2)), cp::shard_sequence(want_whole, 1, r, 2),
                     what + " training forward after generation", 1e-6);
        // accel_model_generate: greedy tokens equal one process's, also with use_cache false (the cache path
        // serves it under cp: forward() would take the prompt for a part).
        for (bool use_cache : {true, false}) {
            accel::config::GenerationConfig g;
            g.max_new_tokens = 3;
            g.use_cache = use_cache;
            EXPECT_TRUE(at::equal(accel::generate(m, prompt, g, false), greedy)) << what << " use_cache " << use_cache;
        }
    });
}

TEST(ContextParallelGeneration, KvCachePathEqualsOneProcess)
{
    const char *llama = R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 16})";
    for (const char *s : {"allgather", "alltoall", "ulysses"}) {
        check_generation<accel::GptModel, accel::GptKvCache>(kGpt, s);
        check_generation<accel::LlamaModel, accel::LlamaKvCache>(llama, s);
    }
}

TEST(ContextParallelGpt, RefusesWhatItCannotSplit)
{
    at::manual_seed(3);
    auto m = accel::make_model_from_json(R"({"type": "gpt", "vocab_size": 8, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2})");
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 1), comm);
        if (comm->rank() == 0) cp::prepare_context_parallel(*m, mesh, "alltoall");
        comm->barrier();
        if (comm->rank() != 0) return;
        accel::Batch b;
        b.inputs = at::zeros({6}, at::kLong);    // no sequence dimension
        EXPECT_THROW(cp::split_batch(b, mesh), accel::Error);
        b.inputs = at::zeros({1, 6}, at::kLong);
        b.labels = at::zeros({1, 5}, at::kLong); // another length
        EXPECT_THROW(cp::split_batch(b, mesh), accel::Error);
        // sp_handler's fixed sp_seq_length: another length is refused naming it, the same one split.
        b.inputs = at::zeros({1, 6}, at::kLong); // (the refusal above came after the inputs were split)
        b.labels = at::zeros({1, 6}, at::kLong);
        try {
            cp::split_batch(b, mesh, 8);
            ADD_FAILURE() << "length 6 accepted for sp_seq_length 8";
        } catch (const accel::Error &e) {
            EXPECT_NE(std::string(e.what()).find("sp_seq_length (8)"), std::string::npos) << e.what();
        }
        cp::split_batch(b, mesh, 6);
        EXPECT_EQ(b.inputs.size(1), 4); // padded to 8, rank 0's half
        // An odd part, or more positions than the model has (2 ranks x 6 > 8): refused by name.
        EXPECT_THROW(m->forward(at::zeros({1, 3}, at::kLong)), accel::Error);
        try {
            m->forward(at::zeros({1, 6}, at::kLong));
            ADD_FAILURE() << "12 positions accepted";
        } catch (const accel::Error &e) {
            EXPECT_NE(std::string(e.what()).find("12 positions"), std::string::npos) << e.what();
        }
    });
    auto mlp = accel::make_model_from_json(R"({"type": "mlp", "widths": [4, 2]})");
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 1), comm);
        if (comm->rank() != 0) return;
        try {
            cp::prepare_context_parallel(*mlp, mesh, "allgather");
            ADD_FAILURE() << "an mlp accepted";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED);
        }
    });
}

} // namespace
