// Tensor-parallel layers (src/parallel/tensor_parallel) on 2 and 4 ranks played by threads: forward outputs,
// input gradients and weight gradients equal the unsplit layer's (and at::cross_entropy's) within 1e-6. The
// whole tensors are made on the test's thread (one generator for the process), each rank slices its part.
// float64 where the arithmetic is ours (the split changes only the order of the sums), float32 for the loss
// against at::cross_entropy (what training uses).
#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "config/optimizer_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/generation.hpp"
#include "model/gpt_model.hpp"
#include "model/linear.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "ops/loss.hpp"
#include "parallel/tensor_parallel/mappings.hpp"
#include "parallel/tensor_parallel/parallel_linear.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/vocab_parallel.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "parallel/whole_gradients.hpp"
#include "tp_generation.hpp"
#include "parallel_test_support.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;
using accel::Linear;

namespace {

using namespace accel_test;

at::Tensor leaf(const at::Tensor &t) { return t.detach().clone().requires_grad_(true); }

// An unsplit Conv1D / nn.Linear layer in the given layout: weight [in, out] or [out, in].
at::Tensor whole_weight(int64_t in, int64_t out, Linear::Layout layout)
{
    return layout == Linear::Layout::InOut ? at::randn({in, out}, at::kDouble) : at::randn({out, in}, at::kDouble);
}

// Megatron's MLP pair: column parallel (outputs split) -> gelu -> row parallel (inputs split), against the
// unsplit pair; both layouts, 2 and 4 ranks.
void check_column_row_pair(int32_t world, Linear::Layout layout)
{
    at::manual_seed(7);
    const int64_t C = 6, H = 8;
    at::Tensor w1 = whole_weight(C, H, layout), b1 = at::randn({H}, at::kDouble);
    at::Tensor w2 = whole_weight(H, C, layout), b2 = at::randn({C}, at::kDouble);
    at::Tensor x = at::randn({2, 3, C}, at::kDouble), gy = at::randn({2, 3, C}, at::kDouble);

    at::Tensor rw1 = leaf(w1), rb1 = leaf(b1), rw2 = leaf(w2), rb2 = leaf(b2), rx = leaf(x);
    at::Tensor ry = accel::make_linear(rw2, rb2, layout)->forward(at::gelu(accel::make_linear(rw1, rb1, layout)->forward(rx)));
    ry.backward(gy);

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        at::Tensor lw1 = leaf(tp::slice(w1, tp::output_dim(layout), r, world));
        at::Tensor lb1 = leaf(tp::slice(b1, 0, r, world));
        at::Tensor lw2 = leaf(tp::slice(w2, tp::input_dim(layout), r, world));
        at::Tensor lb2 = leaf(b2), lx = leaf(x);
        auto col = tp::make_column_parallel_linear(accel::make_linear(lw1, lb1, layout), comm);
        auto row = tp::make_row_parallel_linear(accel::make_linear(lw2, at::Tensor(), layout), lb2, comm);
        EXPECT_TRUE(col->weight().is_same(lw1));
        EXPECT_TRUE(row->bias().is_same(lb2));
        EXPECT_EQ(col->out_features(), H / world);
        at::Tensor y = row->forward(at::gelu(col->forward(lx)));
        y.backward(gy);
        const std::string at_rank = " (rank " + std::to_string(r) + " of " + std::to_string(world) + ")";
        expect_close(y, ry, "output" + at_rank);
        expect_close(lx.grad(), rx.grad(), "input gradient" + at_rank);
        expect_close(lw1.grad(), tp::slice(rw1.grad(), tp::output_dim(layout), r, world), "column weight gradient" + at_rank);
        expect_close(lb1.grad(), tp::slice(rb1.grad(), 0, r, world), "column bias gradient" + at_rank);
        expect_close(lw2.grad(), tp::slice(rw2.grad(), tp::input_dim(layout), r, world), "row weight gradient" + at_rank);
        expect_close(lb2.grad(), rb2.grad(), "row bias gradient" + at_rank);
    });
}

TEST(TensorParallelLinear, ColumnThenRowEqualsUnsplit)
{
    for (int32_t world : {2, 4})
        for (auto layout : {Linear::Layout::InOut, Linear::Layout::OutIn}) check_column_row_pair(world, layout);
}

// Each layer on its own: a column layer gathering its output, a row layer scattering a whole input.
TEST(TensorParallelLinear, GatheredOutputAndScatteredInput)
{
    const int32_t world = 2;
    const auto layout = Linear::Layout::InOut;
    at::manual_seed(8);
    at::Tensor w = whole_weight(4, 6, layout), b = at::randn({6}, at::kDouble);
    at::Tensor x = at::randn({5, 4}, at::kDouble), gy = at::randn({5, 6}, at::kDouble);
    at::Tensor rw = leaf(w), rx = leaf(x);
    accel::make_linear(rw, b, layout)->forward(rx).backward(gy);
    at::Tensor want = accel::make_linear(w, b, layout)->forward(x);
    // The row layer computes x W too, from a whole input it scatters itself.
    at::Tensor wr = whole_weight(6, 4, layout), xr = at::randn({5, 6}, at::kDouble), gr = at::randn({5, 4}, at::kDouble);
    at::Tensor rwr = leaf(wr), rxr = leaf(xr);
    accel::make_linear(rwr, at::Tensor(), layout)->forward(rxr).backward(gr);

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        at::Tensor lw = leaf(tp::slice(w, 1, r, world)), lx = leaf(x);
        auto col = tp::make_column_parallel_linear(accel::make_linear(lw, tp::slice(b, 0, r, world), layout), comm,
                                                   {/*gather_output=*/true, -1});
        at::Tensor y = col->forward(lx);
        expect_close(y, want, "gathered output");
        y.backward(gy);
        expect_close(lx.grad(), rx.grad(), "input gradient");
        expect_close(lw.grad(), tp::slice(rw.grad(), 1, r, world), "weight gradient");

        at::Tensor lwr = leaf(tp::slice(wr, 0, r, world)), lxr = leaf(xr);
        auto row = tp::make_row_parallel_linear(accel::make_linear(lwr, at::Tensor(), layout), at::Tensor(), comm,
                                                {/*input_is_parallel=*/false, -1});
        at::Tensor yr = row->forward(lxr);
        yr.backward(gr);
        expect_close(lxr.grad(), rxr.grad(), "scattered input's gradient");
        expect_close(lwr.grad(), tp::slice(rwr.grad(), 0, r, world), "row weight gradient");
    });
}

// Sequence parallelism: the pair takes and returns the sequence dimension split over the ranks.
TEST(TensorParallelLinear, SequenceParallelPair)
{
    const int32_t world = 2;
    const auto layout = Linear::Layout::InOut;
    at::manual_seed(9);
    const int64_t C = 4, H = 8, T = 6;
    at::Tensor w1 = whole_weight(C, H, layout), w2 = whole_weight(H, C, layout), b2 = at::randn({C}, at::kDouble);
    at::Tensor x = at::randn({2, T, C}, at::kDouble), gy = at::randn({2, T, C}, at::kDouble);
    at::Tensor rw1 = leaf(w1), rx = leaf(x);
    at::Tensor ry = accel::make_linear(w2, b2, layout)->forward(at::relu(accel::make_linear(rw1, at::Tensor(), layout)->forward(rx)));
    ry.backward(gy);

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        at::Tensor lw1 = leaf(tp::slice(w1, 1, r, world));
        at::Tensor lx = leaf(tp::slice(x, 1, r, world)); // this rank's positions
        auto col = tp::make_column_parallel_linear(accel::make_linear(lw1, at::Tensor(), layout), comm, {false, 1});
        auto row = tp::make_row_parallel_linear(accel::make_linear(tp::slice(w2, 0, r, world), at::Tensor(), layout), b2,
                                                comm, {true, 1});
        at::Tensor y = row->forward(at::relu(col->forward(lx)));
        expect_close(y, tp::slice(ry, 1, r, world), "sequence shard of the output");
        y.backward(tp::slice(gy, 1, r, world));
        expect_close(lx.grad(), tp::slice(rx.grad(), 1, r, world), "sequence shard of the input gradient");
        expect_close(lw1.grad(), tp::slice(rw1.grad(), 1, r, world), "column weight gradient");
    });
}

// The last-dimension mappings on their own, forward and backward.
TEST(TensorParallelMappings, GatherAndScatterLastDimension)
{
    const int32_t world = 4;
    at::manual_seed(10);
    at::Tensor whole = at::randn({3, 8}, at::kDouble), g = at::randn({3, 8}, at::kDouble);
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        at::Tensor part = leaf(tp::slice(whole, 1, r, world));
        at::Tensor gathered = tp::gather_last_dim(part, comm);
        expect_close(gathered, whole, "gathered");
        gathered.backward(g);
        expect_close(part.grad(), tp::slice(g, 1, r, world), "gather's gradient");
        at::Tensor w = leaf(whole);
        at::Tensor mine = tp::scatter_last_dim(w, comm);
        expect_close(mine, tp::slice(whole, 1, r, world), "scattered");
        mine.backward(tp::slice(g, 1, r, world));
        expect_close(w.grad(), g, "scatter's gradient (every rank's slice gathered)");
        EXPECT_THROW(tp::scatter_last_dim(at::zeros({2, 3}), comm), accel::Error); // 3 does not divide by 4
    });
}

// GPT-2's fused c_attn [C, 3C]: each rank's slice holds its heads' q, k and v, and join undoes slice.
TEST(TensorParallelSlicing, FusedQkvByHeads)
{
    const int64_t C = 8, world = 2;
    at::Tensor w = at::arange(C * 3 * C, at::kFloat).view({C, 3 * C});
    at::Tensor r1 = tp::slice(w, 1, 1, world, 3);
    EXPECT_EQ(r1.sizes(), (std::vector<int64_t>{C, 3 * C / world}));
    EXPECT_TRUE(r1.narrow(1, 0, 4).equal(w.narrow(1, 4, 4)));          // q columns 4..7
    EXPECT_TRUE(r1.narrow(1, 4, 4).equal(w.narrow(1, C + 4, 4)));      // k
    EXPECT_TRUE(r1.narrow(1, 8, 4).equal(w.narrow(1, 2 * C + 4, 4)));  // v
    EXPECT_TRUE(tp::join({tp::slice(w, 1, 0, world, 3), r1}, 1, 3).equal(w));
    EXPECT_THROW(tp::slice(w, 1, 0, 5, 3), accel::Error);
}

TEST(TensorParallelVocabulary, EmbeddingEqualsUnsplitWithPadding)
{
    for (int32_t world : {2, 4}) {
        at::manual_seed(12);
        const int64_t V = 10, C = 3, Vp = tp::padded_vocab_size(V, world);
        EXPECT_EQ(Vp % world, 0);
        at::Tensor w = at::randn({V, C}, at::kDouble);
        at::Tensor padded = at::cat({w, at::zeros({Vp - V, C}, at::kDouble)});
        at::Tensor ids = at::randint(0, V, {2, 5}, at::kLong), g = at::randn({2, 5, C}, at::kDouble);
        at::Tensor rw = leaf(w);
        at::embedding(rw, ids).backward(g);
        dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
            const int32_t r = comm->rank();
            at::Tensor lw = leaf(tp::slice(padded, 0, r, world));
            at::Tensor out = tp::vocab_parallel_embedding(ids, lw, r * (Vp / world), comm);
            expect_close(out, at::embedding(w, ids), "embedding");
            out.backward(g);
            at::Tensor want = tp::slice(at::cat({rw.grad(), at::zeros({Vp - V, C}, at::kDouble)}), 0, r, world);
            expect_close(lw.grad(), want, "weight gradient");
        });
    }
}

// The vocabulary-parallel loss against at::cross_entropy (float32), with ignored positions and a padded
// vocabulary (11 on 2 and 4 ranks).
TEST(TensorParallelVocabulary, CrossEntropyEqualsUnsplit)
{
    for (int32_t world : {2, 4}) {
        at::manual_seed(13);
        const int64_t V = 11, Vp = tp::padded_vocab_size(V, world), B = 3, T = 4;
        at::Tensor logits = at::randn({B, T, V}) * 3;
        at::Tensor target = at::randint(0, V, {B, T}, at::kLong);
        target.index_put_({0, 1}, -100);
        target.index_put_({2, 3}, V - 1); // the last real column, beside the padding
        at::Tensor rl = leaf(logits);
        at::Tensor want = at::cross_entropy_loss(rl.view({-1, V}), target.view({-1}));
        want.backward();
        at::Tensor padded = at::cat({logits, at::randn({B, T, Vp - V}) * 50}, 2); // padding never predicted
        dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
            const int32_t r = comm->rank();
            at::Tensor local = leaf(tp::slice(padded, 2, r, world));
            tp::VocabParallelLossOptions o;
            o.vocab_start = r * (Vp / world);
            o.vocab_size = V;
            at::Tensor loss = tp::vocab_parallel_cross_entropy(local, target, comm, o);
            expect_close(loss, want, "loss");
            loss.backward();
            at::Tensor g = at::cat({rl.grad(), at::zeros({B, T, Vp - V})}, 2);
            expect_close(local.grad(), tp::slice(g, 2, r, world), "logits' gradient");
            at::Tensor bad = target.clone();
            bad.index_put_({1, 1}, V); // a padding column is no class
            EXPECT_THROW(tp::vocab_parallel_cross_entropy(local, bad, comm, o), accel::Error);
        });
    }
}

// GPT-2's plan (GptModel::apply_tensor_parallel) on 2 and 4 ranks: the loss through compute_loss (which
// takes the vocabulary-parallel cross-entropy for the marked logits) and every parameter's gradient equal one
// process's, each rank holding its slice. A vocabulary of 37 is padded; tied and untied heads; float32, so
// the tolerance is relative to the gradients' scale (the split reorders float32 sums).
void check_gpt_plan(int32_t world, bool tied)
{
    const std::string json = std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 12, "n_embd": 16,
        "n_layer": 2, "n_head": 4, "tie_word_embeddings": )") + (tied ? "true" : "false") + "}";
    std::vector<std::shared_ptr<accel::GptModel>> models;
    for (int32_t r = 0; r <= world; ++r) { // the same seed: every rank starts from one process's weights
        at::manual_seed(21);
        models.push_back(std::dynamic_pointer_cast<accel::GptModel>(accel::make_model_from_json(json.c_str())));
        models.back()->train(false); // no dropout
    }
    at::manual_seed(22);
    at::Tensor ids = at::randint(0, 37, {2, 6}, at::kLong), labels = at::randint(0, 37, {2, 6}, at::kLong);
    labels.index_put_({1, 5}, -100);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto &ref = *models.back();
    at::Tensor want = accel::compute_loss(causal, ref.forward(ids), labels);
    want.backward();

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        auto &m = *models[static_cast<size_t>(r)];
        m.apply_tensor_parallel(comm);
        at::Tensor logits = m.forward(ids);
        EXPECT_EQ(logits.size(-1), tp::padded_vocab_size(37, world) / world); // no rank holds [B, T, V]
        at::Tensor loss = accel::compute_loss(causal, logits, labels);
        expect_close(loss, want, "loss");
        loss.backward();
        const auto &plan = m.tensor_parallel_slicing();
        EXPECT_EQ(plan.size(), 6u * 2 + (tied ? 1 : 2));
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second.grad();
            auto it = plan.find(name);
            at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, r, world);
            expect_close(p.grad(), mine, name + " gradient (rank " + std::to_string(r) + ")",
                         1e-5 * std::max(1.0, whole.abs().max().item<double>()));
        }
    });
}

TEST(TensorParallelGpt, PlanEqualsOneProcess)
{
    for (int32_t world : {2, 4}) {
        check_gpt_plan(world, true);
        check_gpt_plan(world, false);
    }
}

TEST(TensorParallelGpt, RefusesHeadsThatDoNotDivide)
{
    at::manual_seed(23);
    auto m = std::dynamic_pointer_cast<accel::GptModel>(accel::make_model_from_json(
        R"({"type": "gpt", "vocab_size": 8, "n_positions": 4, "n_embd": 8, "n_layer": 1, "n_head": 2})"));
    dist::run_on_threads(4, [&](const std::shared_ptr<dist::Communicator> &comm) {
        if (comm->rank() != 0) return;
        try {
            m->apply_tensor_parallel(comm);
            ADD_FAILURE() << "n_head 2 accepted on 4 ranks";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos) << e.what();
        }
    });
}

// Generation of a tensor-parallel GPT (the KV cache holds each rank's heads; the logits' vocabulary is gathered
// before picking): greedy with and without the cache, and seeded top-k sampling, give one process's tokens on
// every rank of tp 2 (a vocabulary of 37 padded to 38).
TEST(TensorParallelGpt, GenerationEqualsOneProcess)
{
    const char *json = R"({"type": "gpt", "vocab_size": 37, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 4})";
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int r = 0; r < 3; ++r) {
        at::manual_seed(41);
        models.push_back(accel::make_model_from_json(json));
    }
    expect_tp_generation_equals_one_process(models, 8);
}

// Training through prepare's wrapper (prepare_tensor_parallel) on tp 2 and on tp 2 x dp_replicate 2: 20 AdamW
// steps, accumulation 2 (the first micro-batch without synchronisation), clipping to a norm the gradients
// exceed; every rank's parameters equal its slice of one process's on the same global batch within 1e-5
// relative, and the clipped norms agree (each tp shard counted once, each replicated parameter once).
void check_training(int32_t dp, int32_t tpn)
{
    const int32_t world = dp * tpn;
    const char *json = R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_layer": 2, "n_head": 4})";
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= world; ++r) {
        at::manual_seed(31);
        models.push_back(accel::make_model_from_json(json));
        models.back()->train(false); // no dropout
    }
    constexpr int kSteps = 20, kMicro = 2;
    constexpr double kClip = 0.05, kLr = 1e-2;
    at::manual_seed(32);
    at::Tensor ids = at::randint(0, 37, {kSteps, kMicro, 4, 8}, at::kLong);
    at::Tensor labels = at::randint(0, 37, {kSteps, kMicro, 4, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto adamw = [&](const std::vector<at::Tensor> &params) {
        return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.01));
    };

    auto &ref = *models.back();
    auto ref_opt = adamw(ref.parameters());
    std::vector<double> ref_norms;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kMicro; ++k)
            (accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]) / kMicro).backward();
        ref_norms.push_back(accel::parallel::whole_clip_grad_norm(ref.parameters(), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(dp, 1, 1, tpn), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        auto wrapper = tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{});
        EXPECT_EQ(wrapper->ddp() != nullptr, dp > 1);
        try { // FSDP's idiom (summon, then generate) goes on with the model as it is, as for DDP
            wrapper->summon_full_params(true);
            ADD_FAILURE() << "summon_full_params of a tensor-parallel model accepted";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION) << e.what();
        }
        auto opt = adamw(m.parameters());
        const int64_t rows = 4 / dp, first = mesh.rank_in(dist::MeshDim::DpCp) * rows; // the tp group's rows
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kMicro; ++k) {
                wrapper->set_require_sync(k == kMicro - 1);
                at::Tensor x = ids[s][k].narrow(0, first, rows), y = labels[s][k].narrow(0, first, rows);
                (accel::compute_loss(causal, m.forward(x), y) / kMicro).backward();
                wrapper->finish_backward();
            }
            const double norm = wrapper->clip_grad_norm(kClip, 2.0, true);
            EXPECT_NEAR(norm, ref_norms[static_cast<size_t>(s)], 1e-5 * ref_norms[static_cast<size_t>(s)]) << "step " << s;
            opt.step();
            opt.zero_grad();
        }
        const auto &plan = dynamic_cast<accel::GptModel &>(m).tensor_parallel_slicing();
        const int32_t t = mesh.rank_in(dist::MeshDim::Tp);
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second;
            auto it = plan.find(name);
            at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, t, tpn);
            expect_close(p, mine, name + " after training (rank " + std::to_string(comm->rank()) + ")",
                         1e-5 * std::max(1.0, whole.abs().max().item<double>()));
        }
    });
}

TEST(TensorParallelTraining, EqualsOneProcess)
{
    check_training(1, 2);
    check_training(2, 2);
}

// Checkpoints of a split model (whole_state.hpp) on 2 and 4 ranks, a padded vocabulary of 37, tied and untied
// heads: after an AdamW step, gathering makes every split parameter and its two moments one process's shape
// (the padding rows dropped), holding each rank's slice in place (slicing the gathered tensor gives back the
// slice bit for bit); whole tensors written while gathered (a loaded checkpoint: one process's trained weights
// and moments) are cut into each rank's slices of them, padding rows zero.
void check_whole_state(int32_t world, bool tied)
{
    const std::string json = std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16,
        "n_layer": 1, "n_head": 4, "tie_word_embeddings": )") + (tied ? "true" : "false") + "}";
    const auto adamw = accel::config::parse_optimizer_config(R"({"type": "adamw", "lr": 0.01})");
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int32_t r = 0; r <= world; ++r) {
        at::manual_seed(51);
        models.push_back(accel::make_model_from_json(json.c_str()));
        models.back()->train(false);
    }
    at::manual_seed(52);
    const at::Tensor ids = at::randint(0, 37, {2, 8}, at::kLong), labels = at::randint(0, 37, {2, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto step = [&](accel::Model &m, accel::AcceleratedOptimizer &o) {
        accel::compute_loss(causal, m.forward(ids), labels).backward();
        o.step();
        o.zero_grad();
    };
    auto ref_opt = std::make_shared<accel::AcceleratedOptimizer>(models.back(), adamw);
    step(*models.back(), *ref_opt);
    step(*models.back(), *ref_opt); // the "checkpoint" written while gathered differs from the ranks' state
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        auto &m = dynamic_cast<accel::GptModel &>(*models[static_cast<size_t>(r)]);
        m.apply_tensor_parallel(comm);
        accel::AcceleratedOptimizer opt(models[static_cast<size_t>(r)], adamw);
        step(m, opt);
        const auto &plan = m.tensor_parallel_slicing();
        std::map<std::string, std::vector<at::Tensor>> before; // each split parameter and its moments, sliced
        for (const auto &[name, s] : plan) {
            const at::Tensor &p = *m.find_tensor(name);
            before[name] = {p.clone()};
            for (const auto &t : opt.state_tensors(p)) before[name].push_back(t.defined() ? t.clone() : t);
        }
        tp::WholeForCheckpoint::Part part{&m, {&opt}};
        {
            tp::WholeForCheckpoint whole({part});
            for (const auto &[name, s] : plan) {
                at::Tensor p = *m.find_tensor(name);
                const at::Tensor &ref_p = *models.back()->find_tensor(name);
                ASSERT_EQ(p.sizes(), ref_p.sizes()) << name << " gathered (rank " << r << ")";
                std::vector<at::Tensor> st = opt.state_tensors(p), ref_st = ref_opt->state_tensors(ref_p);
                ASSERT_EQ(st.size(), before[name].size() - 1);
                EXPECT_TRUE(at::equal(tp::slice_parameter(p, s, r, world), before[name][0])) << name;
                for (size_t i = 0; i < st.size(); ++i) {
                    if (!st[i].defined()) continue;
                    ASSERT_EQ(st[i].sizes(), p.sizes()) << name << " state " << i;
                    EXPECT_TRUE(at::equal(tp::slice_parameter(st[i], s, r, world), before[name][i + 1])) << name;
                    st[i] = ref_st[i].clone(); // as load_state writes a whole checkpoint's moments
                }
                opt.set_state_tensors(p, st);
                p.detach().copy_(ref_p);
            }
        }
        for (const auto &[name, s] : plan) {
            const at::Tensor &p = *m.find_tensor(name), &ref_p = *models.back()->find_tensor(name);
            EXPECT_TRUE(at::equal(p, tp::slice_parameter(ref_p, s, r, world))) << name << " sliced (rank " << r << ")";
            std::vector<at::Tensor> st = opt.state_tensors(p), ref_st = ref_opt->state_tensors(ref_p);
            for (size_t i = 0; i < st.size(); ++i) {
                if (st[i].defined()) {
                    EXPECT_TRUE(at::equal(st[i], tp::slice_parameter(ref_st[i], s, r, world))) << name;
                }
            }
        }
    });
}

TEST(TensorParallelCheckpoint, WholeTensorsAndBackToSlices)
{
    for (int32_t world : {2, 4}) {
        check_whole_state(world, true);
        check_whole_state(world, false);
    }
}

} // namespace
