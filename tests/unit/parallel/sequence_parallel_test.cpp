// Sequence parallelism in the gpt model and the tensor-parallel dropout generators (issue 33), on 2 and 4 ranks
// played by threads.
//  - GptModel::set_sequence_parallel before apply_tensor_parallel: the loss and every parameter's gradient equal
//    one process's (the norms' and row biases' gradients summed over tp), and the activations between the layers
//    are [B, T / tp, C] (the blocks' input is this rank's share of the positions).
//  - The llama's (RMSNorms on the shard, rotary positions of the whole sequence, grouped-query attention): 20 AdamW
//    steps through prepare's plan (tp_handler.sequence_parallel), accumulation 2, clipping, equal one process's
//    within 1e-5 relative; generation with a key/value cache, lengths not dividing by tp and cp refused by name.
//  - DropoutGenerator (Megatron's RNG tracker): each tp rank's masks differ from the others', the same rank's are
//    the same from the same seed; region_dropout without one draws from the default generator.
// (Dropout of replicated regions against one process needs one default generator per rank: processes,
// tests/distributed/run_tp.py dropout.)
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"
#include "config/accelerator_config.hpp"
#include "config/generation_config.hpp"
#include "distributed/device_mesh.hpp"
#include "model/generation.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/context_parallel/plan.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel/whole_gradients.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

void check_sequence_parallel(int32_t world)
{
    const char *json = R"({"type": "gpt", "vocab_size": 37, "n_positions": 12, "n_embd": 16, "n_layer": 2,
        "n_head": 4, "tie_word_embeddings": true})";
    std::vector<std::shared_ptr<accel::GptModel>> models;
    for (int32_t r = 0; r <= world; ++r) { // the same seed: every rank starts from one process's weights
        at::manual_seed(31);
        models.push_back(std::dynamic_pointer_cast<accel::GptModel>(accel::make_model_from_json(json)));
        models.back()->train(false); // no dropout
    }
    at::manual_seed(32);
    at::Tensor ids = at::randint(0, 37, {2, 8}, at::kLong), labels = at::randint(0, 37, {2, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto &ref = *models.back();
    at::Tensor want = accel::compute_loss(causal, ref.forward(ids), labels);
    want.backward();

    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        auto &m = *models[static_cast<size_t>(r)];
        m.set_sequence_parallel(true);
        m.apply_tensor_parallel(comm);
        at::Tensor loss = accel::compute_loss(causal, m.forward(ids), labels);
        EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-5 * std::abs(want.item<double>())) << "rank " << r;
        loss.backward();
        const auto &plan = m.tensor_parallel_slicing();
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second.grad();
            auto it = plan.find(name);
            at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, r, world);
            const double tol = 1e-5 * std::max(1.0, whole.abs().max().item<double>());
            EXPECT_TRUE(p.grad().defined() && at::allclose(p.grad(), mine, 0.0, tol))
                << name << " gradient (rank " << r << ", tp " << world << ") differs by "
                << (p.grad().defined() ? (p.grad() - mine).abs().max().item<double>() : -1.0);
        }
        // A sequence length that does not divide by tp is refused by name.
        try {
            m.forward(at::randint(0, 37, {1, 2 * world + 1}, at::kLong));
            ADD_FAILURE() << "an odd sequence accepted";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(e.what()).find("sequence_parallel"), std::string::npos) << e.what();
            EXPECT_EQ(std::string(e.what()).rfind("gpt: input: sequence length", 0), 0u) << e.what();
        }
    });
}

} // namespace

TEST(SequenceParallelGpt, EqualsOneProcess)
{
    for (int32_t world : {2, 4}) check_sequence_parallel(world);
}

TEST(TensorParallelDropout, MasksDifferAcrossRanksAndRepeatFromTheSeed)
{
    at::manual_seed(5);
    const at::Tensor ones = at::ones({4, 64});
    std::vector<at::Tensor> masks;
    for (int64_t rank : {0, 1, 2}) masks.push_back(tp::make_dropout_generator(rank)->dropout(ones, 0.5));
    EXPECT_FALSE(at::equal(masks[0], masks[1]));
    EXPECT_FALSE(at::equal(masks[1], masks[2]));
    // Kept elements are scaled by 1 / (1 - p), dropped ones are 0.
    EXPECT_TRUE(at::logical_or(masks[0] == 0.0, masks[0] == 2.0).all().item<bool>());
    at::manual_seed(5); // the same seed: the same rank's masks again
    EXPECT_TRUE(at::equal(tp::make_dropout_generator(1)->dropout(ones, 0.5), masks[1]));
    // The tp generator leaves the default one alone (replicated regions keep one process's sequence).
    at::manual_seed(6);
    const at::Tensor first = at::rand({3});
    at::manual_seed(6);
    auto g = tp::make_dropout_generator(0);
    g->dropout(ones, 0.5);
    EXPECT_TRUE(at::equal(at::rand({3}), first));
    // Without a generator: the default one, as at::dropout.
    at::manual_seed(7);
    const at::Tensor plain = at::dropout(ones, 0.25, true);
    at::manual_seed(7);
    EXPECT_TRUE(at::equal(tp::region_dropout(ones, 0.25, true, nullptr), plain));
    // Not training: the input as it is.
    EXPECT_TRUE(at::equal(tp::region_dropout(ones, 0.25, false, g), ones));
    // The state round-trips (activation checkpointing reruns a layer with the first run's masks).
    const at::Tensor state = g->state();
    const at::Tensor a = g->dropout(ones, 0.5);
    g->set_state(state);
    EXPECT_TRUE(at::equal(g->dropout(ones, 0.5), a));
}

namespace {

// A llama with grouped-query attention (4 query heads over 2 key/value heads), optionally selective recomputation.
std::string llama_sp_spec(bool selective)
{
    return std::string(R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": 0.2,
        "rope_theta": 100.0, "attention_bias": true)") + (selective ? R"(, "recompute_granularity": "selective"})" : "}");
}

std::shared_ptr<accel::Model> llama_copy(const std::string &spec)
{
    at::manual_seed(41);
    auto m = accel::make_model_from_json(spec.c_str());
    m->train(false);
    at::NoGradGuard no_grad; // float64: the split's reordered sums stay far below the tolerance after AdamW
    for (const auto &p : m->parameters()) at::Tensor(p).set_data(p.detach().to(at::kDouble));
    return m;
}

void check_llama_training(bool selective)
{
    constexpr int kSteps = 20, kMicro = 2;
    constexpr double kClip = 0.05, kLr = 1e-2;
    const std::string spec = llama_sp_spec(selective);
    std::vector<std::shared_ptr<accel::Model>> models;
    for (int i = 0; i < 3; ++i) models.push_back(llama_copy(spec));
    at::manual_seed(42);
    const at::Tensor ids = at::randint(0, 37, {kSteps, kMicro, 2, 8}, at::kLong);
    const at::Tensor labels = at::randint(0, 37, {kSteps, kMicro, 2, 8}, at::kLong);
    const accel::Loss causal(accel::LossKind::CausalLm);
    auto adamw = [&](accel::Model &m) {
        return torch::optim::AdamW(m.parameters(), torch::optim::AdamWOptions(kLr).weight_decay(0.01));
    };
    auto &ref = *models.back();
    auto ref_opt = adamw(ref);
    std::vector<double> ref_loss;
    for (int s = 0; s < kSteps; ++s) {
        for (int k = 0; k < kMicro; ++k) {
            at::Tensor loss = accel::compute_loss(causal, ref.forward(ids[s][k]), labels[s][k]);
            ref_loss.push_back(loss.item<double>());
            (loss / kMicro).backward();
        }
        accel::parallel::whole_clip_grad_norm(ref.parameters(), kClip, 2.0, true);
        ref_opt.step();
        ref_opt.zero_grad();
    }
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, 2), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        auto wrapper = tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{},
                                                   /*sequence_parallel=*/true);
        auto opt = adamw(m);
        size_t i = 0;
        for (int s = 0; s < kSteps; ++s) {
            for (int k = 0; k < kMicro; ++k, ++i) {
                wrapper->set_require_sync(k == kMicro - 1);
                at::Tensor loss = accel::compute_loss(causal, m.forward(ids[s][k]), labels[s][k]);
                EXPECT_NEAR(loss.item<double>(), ref_loss[i], 1e-5 * std::abs(ref_loss[i])) << "step " << s;
                (loss / kMicro).backward();
                wrapper->finish_backward();
            }
            wrapper->clip_grad_norm(kClip, 2.0, true);
            opt.step();
            opt.zero_grad();
        }
        const auto &plan = dynamic_cast<tp::TensorParallelModel &>(m).tensor_parallel_slicing();
        for (size_t j = 0; j < m.named_parameters().size(); ++j) {
            const auto &[name, p] = m.named_parameters()[j];
            const at::Tensor &whole = ref.named_parameters()[j].second;
            auto it = plan.find(name);
            at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, comm->rank(), 2);
            const double tol = 1e-5 * std::max(1.0, whole.abs().max().item<double>());
            EXPECT_TRUE(at::allclose(p, mine, 0.0, tol)) << name << " after training (rank " << comm->rank() << ") differs by "
                                                         << (p - mine).abs().max().item<double>();
        }
    });
}

} // namespace

TEST(SequenceParallelLlama, TrainingEqualsOneProcess)
{
    check_llama_training(false);
    check_llama_training(true); // with selective recomputation of the attention core
}

TEST(SequenceParallelLlama, RefusesWhatItCannotSplit)
{
    std::vector<std::shared_ptr<accel::Model>> models = {llama_copy(llama_sp_spec(false)), llama_copy(llama_sp_spec(false))};
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        auto &m = dynamic_cast<accel::LlamaModel &>(*models[static_cast<size_t>(comm->rank())]);
        m.set_sequence_parallel(true);
        m.apply_tensor_parallel(comm);
        auto expect_refusal = [&](const std::function<void()> &f, accel_status_t code, const std::string &what) {
            try {
                f();
                ADD_FAILURE() << what << " accepted";
            } catch (const accel::Error &e) {
                EXPECT_EQ(e.code(), code) << e.what();
                EXPECT_NE(std::string(e.what()).find("sequence_parallel"), std::string::npos) << e.what();
            }
        };
        expect_refusal([&] { m.forward(at::randint(0, 37, {1, 5}, at::kLong)); }, ACCEL_ERR_INVALID_ARGUMENT, "length 5");
        accel::config::GenerationConfig g;
        g.max_new_tokens = 2;
        expect_refusal([&] { accel::generate(m, at::randint(0, 37, {1, 4}, at::kLong), g, false); },
                       ACCEL_ERR_UNIMPLEMENTED, "generation with a cache");
    });
    // Under context parallelism (tp 2 x cp 2).
    std::vector<std::shared_ptr<accel::Model>> four;
    for (int i = 0; i < 4; ++i) four.push_back(llama_copy(llama_sp_spec(false)));
    dist::run_on_threads(4, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 2, 2), comm);
        auto &m = *four[static_cast<size_t>(comm->rank())];
        accel::parallel::cp::prepare_context_parallel(m, mesh, "allgather");
        try {
            tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{}, true);
            ADD_FAILURE() << "sequence parallelism accepted under cp";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED);
            EXPECT_NE(std::string(e.what()).find("sequence_parallel"), std::string::npos) << e.what();
        }
    });
}
