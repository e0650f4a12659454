// Sequence parallelism in the gpt model and the tensor-parallel dropout generators (issue 33), on 2 and 4 ranks
// played by threads.
//  - GptModel::set_sequence_parallel before apply_tensor_parallel: the loss and every parameter's gradient equal
//    one process's (the norms' and row biases' gradients summed over tp), and the activations between the layers
//    are [B, T / tp, C] (the blocks' input is this rank's share of the positions).
//  - DropoutGenerator (Megatron's RNG tracker): each tp rank's masks differ from the others', the same rank's are
//    the same from the same seed; region_dropout without one draws from the default generator.
// (Dropout of replicated regions against one process needs one default generator per rank: processes,
// tests/distributed/run_tp.py dropout.)
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/gpt_model.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "parallel/tensor_parallel/slicing.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

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
