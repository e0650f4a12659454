// Tensor parallelism of the llama model (LlamaModel::apply_tensor_parallel: transformers' base_model_tp_plan) and of
// LoRA adapters under it (plan_linear.hpp), on 2 and 4 ranks played by threads: loss and gradients of one forward,
// then 20 AdamW steps through prepare's wrapper (accumulation 2, clipping), equal one process's on the same
// global batch within 1e-5 relative (float32; the split reorders sums). Covered: grouped-query attention
// (num_key_value_heads 2 at tp 2), tied and untied heads, Qwen2's q/k/v biases, a vocabulary padded to a multiple
// of tp with a pad token, tp 2 x dp_replicate 2, generation, and the refusals by name.
#include "common/error.hpp"
#include "common/files.hpp"
#include "config/accelerator_config.hpp"
#include "config/checkpoint_options.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "data_loader/dataset.hpp"
#include "model/generation.hpp"
#include "model/llama_model.hpp"
#include "model/model.hpp"
#include "model/pretrained.hpp"
#include "ops/loss.hpp"
#include "parallel/context_parallel/plan.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/tensor_parallel/vocab_parallel.hpp"
#include "parallel/tensor_parallel/whole_state.hpp"
#include "parallel/whole_gradients.hpp"
#include "tp_generation.hpp"
#include "parallel_test_support.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <torch/optim/adamw.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

using namespace accel_test;

// A tiny llama: 4 query heads over `kv` key/value heads, a vocabulary of 37 (padded under tp 2 and 4), pad token 3.
std::string llama_spec(int64_t kv, bool tied, bool qwen2_biases, const std::string &lora = "")
{
    return std::string(R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "initializer_range": 0.2, "pad_token_id": 3,
        "num_key_value_heads": )") + std::to_string(kv) + R"(, "tie_word_embeddings": )" + (tied ? "true" : "false") +
           R"(, "attention_bias": )" + (qwen2_biases ? "true" : "false") + (lora.empty() ? "" : ", \"lora\": " + lora) + "}";
}

// `count` copies of one model (the same seed): every rank starts from one process's weights. LoRA's B (zero at
// creation) gets random values so that A has a gradient.
std::vector<std::shared_ptr<accel::Model>> copies(const std::string &spec, int32_t count, bool float64 = false)
{
    std::vector<std::shared_ptr<accel::Model>> out;
    for (int32_t i = 0; i < count; ++i) {
        at::manual_seed(61);
        out.push_back(accel::make_model_from_json(spec.c_str()));
        out.back()->train(false);
        at::NoGradGuard no_grad;
        at::manual_seed(62);
        for (const auto &[name, p] : out.back()->named_parameters())
            if (name.find("lora_B") != std::string::npos) at::Tensor(p).normal_(0.0, 0.5);
        if (float64)
            for (const auto &p : out.back()->parameters()) at::Tensor(p).set_data(p.detach().to(at::kDouble));
    }
    return out;
}

// One forward and backward: loss and every gradient equal one process's, each rank holding its slices.
void check_plan(int32_t world, const std::string &spec, size_t split_count)
{
    auto models = copies(spec, world + 1);
    at::manual_seed(63);
    at::Tensor ids = at::randint(0, 37, {2, 6}, at::kLong), labels = at::randint(0, 37, {2, 6}, at::kLong);
    ids.index_put_({0, 1}, 3); // the pad token: its row gets no gradient from the embedding
    labels.index_put_({1, 5}, -100);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto &ref = *models.back();
    at::Tensor want = accel::compute_loss(causal, ref.forward(ids), labels);
    want.backward();
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        auto &m = *models[static_cast<size_t>(r)];
        dynamic_cast<accel::LlamaModel &>(m).apply_tensor_parallel(comm);
        at::Tensor logits = m.forward(ids);
        EXPECT_EQ(logits.size(-1), tp::padded_vocab_size(37, world) / world); // no rank holds [B, T, V]
        at::Tensor loss = accel::compute_loss(causal, logits, labels);
        expect_close(loss, want, "loss", 1e-5);
        loss.backward();
        const auto &plan = plan_of(m);
        EXPECT_EQ(plan.size(), split_count) << spec;
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second.grad();
            if (!whole.defined()) { // frozen
                EXPECT_FALSE(p.grad().defined()) << name;
                continue;
            }
            auto it = plan.find(name);
            at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, r, world);
            expect_close(p.grad(), mine, name + " gradient (rank " + std::to_string(r) + ")", rel_tol(whole));
        }
    });
}

TEST(TensorParallelLlama, PlanEqualsOneProcess)
{
    // Per layer q, k, v, gate, up (weight), o, down (weight) split: 7; Qwen2's q/k/v biases: 3 more; the
    // embedding, and the head when untied.
    check_plan(2, llama_spec(2, true, false), 2 * 7 + 1);
    check_plan(2, llama_spec(2, false, true), 2 * 10 + 2);
    check_plan(4, llama_spec(4, true, true), 2 * 10 + 1);
    check_plan(4, llama_spec(4, false, false), 2 * 7 + 2);
}

// LoRA under tp: column-wise bases split lora_B by rows, row-wise ones lora_A by columns (the others whole).
TEST(TensorParallelLlama, LoraPlanEqualsOneProcess)
{
    const std::string lora = R"({"r": 4, "lora_alpha": 8, "target_modules": "all-linear"})";
    // Per layer the 7 weights and one adapter matrix per linear.
    check_plan(2, llama_spec(2, true, false, lora), 2 * 14 + 1);
    check_plan(4, llama_spec(4, false, true, lora), 2 * 17 + 2);
}

TEST(TensorParallelLlama, RefusesSizesThatDoNotDivide)
{
    struct Case {
        std::string spec, key;
    };
    const std::vector<Case> cases = {
        {llama_spec(1, true, false), "num_key_value_heads (1)"},
        {R"({"type": "llama", "vocab_size": 8, "hidden_size": 12, "intermediate_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 6, "num_key_value_heads": 2})", "num_attention_heads (6)"},
        {R"({"type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 6, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 4})", "intermediate_size (6)"},
    };
    for (const auto &c : cases) {
        at::manual_seed(64);
        auto m = accel::make_model_from_json(c.spec.c_str());
        dist::run_on_threads(c.key == "num_key_value_heads (1)" ? 2 : 4,
                             [&](const std::shared_ptr<dist::Communicator> &comm) {
            if (comm->rank() != 0) return;
            try {
                dynamic_cast<accel::LlamaModel &>(*m).apply_tensor_parallel(comm);
                ADD_FAILURE() << c.key << ": accepted";
            } catch (const accel::Error &e) {
                EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
                EXPECT_NE(std::string(e.what()).find(c.key), std::string::npos) << e.what();
            }
        });
    }
}

// Greedy (with and without the KV cache, which holds each rank's key/value heads) and seeded sampling give one
// process's tokens on every rank of tp 2.
TEST(TensorParallelLlama, GenerationEqualsOneProcess)
{
    expect_tp_generation_equals_one_process(copies(llama_spec(2, false, true), 3), 6);
}

// 20 AdamW steps through prepare_tensor_parallel, accumulation 2 (the first micro-batch without synchronisation),
// clipping to a norm the gradients exceed: every rank's parameters equal its slice of one process's, the clipped
// norms agree; the frozen base of a LoRA model keeps its bytes. In float64 (RMSNorm still normalises in float32,
// as transformers'): in float32 AdamW's normalisation turns the split's reordered sums into differences of about
// 1e-5 after 20 steps, which would measure rounding rather than the plan.
void check_training(int32_t dp, int32_t tpn, const std::string &spec)
{
    const int32_t world = dp * tpn;
    auto models = copies(spec, world + 1, /*float64=*/true);
    constexpr int kSteps = 20, kMicro = 2;
    constexpr double kClip = 0.05, kLr = 1e-2;
    at::manual_seed(65);
    at::Tensor ids = at::randint(0, 37, {kSteps, kMicro, 4, 8}, at::kLong);
    at::Tensor labels = at::randint(0, 37, {kSteps, kMicro, 4, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto trainable = [](accel::Model &m) {
        std::vector<at::Tensor> out;
        for (const auto &p : m.parameters())
            if (p.requires_grad()) out.push_back(p);
        return out;
    };
    auto adamw = [&](const std::vector<at::Tensor> &params) {
        return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.01));
    };
    auto &ref = *models.back();
    std::vector<at::Tensor> before;
    for (const auto &p : ref.parameters()) before.push_back(p.detach().clone());
    auto ref_opt = adamw(trainable(ref));
    std::vector<double> ref_norms;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kMicro; ++k)
            (accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]) / kMicro).backward();
        ref_norms.push_back(accel::parallel::whole_clip_grad_norm(trainable(ref), kClip, 2.0, true));
        ref_opt.step();
        ref_opt.zero_grad();
    }
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(dp, 1, 1, tpn), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        auto wrapper = tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{});
        auto opt = adamw(trainable(m));
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
        const auto &plan = plan_of(m);
        const int32_t t = mesh.rank_in(dist::MeshDim::Tp);
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second;
            auto it = plan.find(name);
            auto mine = [&](const at::Tensor &w) { return it == plan.end() ? w : tp::slice_parameter(w, it->second, t, tpn); };
            const std::string at_rank = " (rank " + std::to_string(comm->rank()) + ")";
            expect_close(p, mine(whole), name + " after training" + at_rank, rel_tol(whole));
            if (!p.requires_grad()) {
                EXPECT_TRUE(at::equal(p, mine(before[i]))) << name << ": frozen, but moved" << at_rank;
            }
        }
    });
}

TEST(TensorParallelLlama, TrainingEqualsOneProcess)
{
    check_training(1, 2, llama_spec(2, true, false));
    check_training(1, 2, llama_spec(2, false, true));
    check_training(1, 4, llama_spec(4, false, true));
    check_training(2, 2, llama_spec(2, true, true));
}

TEST(TensorParallelLlama, LoraTrainingEqualsOneProcess)
{
    const std::string lora = R"({"r": 4, "lora_alpha": 8, "target_modules": "all-linear"})";
    check_training(1, 2, llama_spec(2, true, true, lora));
    check_training(2, 2, llama_spec(2, false, false, lora));
    // The gpt's plan splits its adapters the same way (c_attn's lora_B by heads, as its weight).
    check_training(1, 2, std::string(R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_layer": 2,
        "n_head": 4, "lora": )") + lora + "}");
}

// save_model / save_state gather the split tensors (whole_state.hpp): the llama's and its adapters' whole tensors
// are one process's, and cut back to the very slices afterwards.
TEST(TensorParallelLlama, WholeTensorsForCheckpoints)
{
    auto models = copies(llama_spec(2, false, true, R"({"r": 4, "target_modules": "all-linear"})"), 3);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        auto &m = *models[static_cast<size_t>(comm->rank())];
        dynamic_cast<accel::LlamaModel &>(m).apply_tensor_parallel(comm);
        accel_test::expect_whole_for_checkpoint(m, *models.back());
    });
}

// tp 2 x cp 2 (4 thread ranks; each cp rank's part of every sequence, as the prepared loader splits it, computed by
// its tp group with half of the heads): the loss and every gradient equal one process's.
TEST(TensorParallelLlama, WithContextParallelEqualsOneProcess)
{
    for (const char *strategy : {"allgather", "alltoall"}) {
        auto models = copies(llama_spec(2, false, true), 5);
        at::manual_seed(66);
        const at::Tensor ids = at::randint(0, 37, {2, 8}, at::kLong), labels = at::randint(0, 37, {2, 8}, at::kLong);
        const accel::Loss causal(accel::LossKind::CausalLm);
        auto &ref = *models.back();
        at::Tensor want = accel::compute_loss(causal, ref.forward(ids), labels);
        want.backward();
        dist::run_on_threads(4, [&](const std::shared_ptr<dist::Communicator> &comm) {
            dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 2), comm);
            auto &m = *models[static_cast<size_t>(comm->rank())];
            accel::parallel::cp::prepare_context_parallel(m, mesh, strategy);
            tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{});
            accel::Batch b;
            b.inputs = ids;
            b.labels = labels;
            accel::parallel::cp::split_batch(b, mesh);
            at::Tensor loss = accel::compute_loss(causal, m.forward(b.inputs), b.labels);
            expect_close(loss, want, std::string(strategy) + " loss", 1e-5);
            loss.backward();
            // Each cp rank's gradient is its part, scaled for the data-parallel average over dp_cp that DDP takes
            // in training (cp/loss.hpp): averaged here.
            const auto &plan = plan_of(m);
            const int32_t t = mesh.rank_in(dist::MeshDim::Tp);
            for (size_t i = 0; i < m.named_parameters().size(); ++i) {
                const auto &[name, p] = m.named_parameters()[i];
                at::Tensor g = p.grad().clone();
                mesh.group(dist::MeshDim::DpCp)->allreduce(g, dist::ReduceOp::Avg);
                const at::Tensor &whole = ref.named_parameters()[i].second.grad();
                auto it = plan.find(name);
                at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, t, 2);
                expect_close(g, mine, std::string(strategy) + " " + name + " gradient", rel_tol(whole));
            }
        });
    }
}

std::string file_bytes(const std::filesystem::path &p)
{
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// save_pretrained's adapter folder (adapter_only) and merged weights (merge) of a tp 2 llama, written while the
// split tensors are gathered (as save_model does), are one process's files byte for byte: the whole adapters.
TEST(TensorParallelLlama, AdapterFoldersEqualOneProcess)
{
    namespace fs = std::filesystem;
    auto models = copies(llama_spec(2, false, true, R"({"r": 4, "target_modules": "all-linear"})"), 3);
    const fs::path root = fs::temp_directory_path() / ("accel_tp_lora_" + std::to_string(::getpid()));
    for (const bool merge : {false, true}) {
        accel::config::SaveModelOptions o;
        o.adapter_only = !merge;
        o.merge = merge;
        const fs::path one = root / (merge ? "one_merged" : "one_adapter"), split = root / (merge ? "tp_merged" : "tp_adapter");
        accel::write_pretrained(*models.back(), one.string(), o);
        dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
            auto &m = *models[static_cast<size_t>(comm->rank())];
            if (!merge) dynamic_cast<accel::LlamaModel &>(m).apply_tensor_parallel(comm);
            tp::WholeForCheckpoint whole(std::vector<tp::WholeForCheckpoint::Part>{{&m, {}}});
            if (comm->rank() == 0) accel::write_pretrained(m, split.string(), o);
        });
        size_t files = 0;
        for (const auto &e : fs::directory_iterator(one)) {
            ++files;
            EXPECT_EQ(file_bytes(e.path()), file_bytes(split / e.path().filename()))
                << e.path().filename() << (merge ? " (merge)" : " (adapter_only)");
        }
        EXPECT_GE(files, 2u);
    }
    accel::remove_all(root); // not std::filesystem's (crashes with pip's LibTorch 2: files.cpp)
}

} // namespace
