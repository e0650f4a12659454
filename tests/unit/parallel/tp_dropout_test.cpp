// Dropout under tensor parallelism (issue 33, rng_tracker.hpp) for the models beyond the gpt, on two thread ranks.
// The thread ranks share one default generator, so "the ranks' masks differ" alone cannot tell a split region's
// generator from the default one (threads drawing from it in turn get different masks too). What these tests check
// instead, besides the differing masks:
//  - a split region's draws leave the default generator where it was (a split region that draws from it would
//    give every process of a real tp group the same masks, and move the replicated regions' stream off one
//    process's), and advance the rank's own generator;
//  - a rerun from the same seed, activation checkpointing's and selective recomputation's reruns, and a resume from
//    the saved generator state (rng_checkpoint.hpp) give the same gradients / losses bit for bit.
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/llama_model.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "parallel/tensor_parallel/rng_checkpoint.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "state/state_dict.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

using Grads = std::vector<at::Tensor>;

// A llama with 4 query heads over 2 key/value heads (tp 2: 2 and 1 per rank), head_dim 4.
std::string llama_spec(double p, const std::string &extra = "")
{
    return R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": 0.2, "attention_dropout": )" +
           std::to_string(p) + extra + "}";
}

// Rank 1's heads made copies of rank 0's (q, k, v rows, o_proj's columns): with equal masks the two ranks'
// gradients of their q/k/v slices are then equal, so differing gradients show differing masks.
void mirror_heads(accel::Model &m)
{
    at::NoGradGuard no_grad;
    for (const auto &[name, p] : m.named_parameters()) {
        if (name.find("self_attn") == std::string::npos) continue;
        const int64_t dim = name.find("o_proj") != std::string::npos ? 1 : 0, half = p.size(dim) / 2;
        at::Tensor(p).narrow(dim, half, half).copy_(p.narrow(dim, 0, half));
    }
}

std::vector<std::shared_ptr<accel::Model>> split_models(const std::string &spec, int count)
{
    std::vector<std::shared_ptr<accel::Model>> out;
    for (int i = 0; i < count; ++i) {
        at::manual_seed(81);
        out.push_back(accel::make_model_from_json(spec.c_str()));
        mirror_heads(*out.back());
    }
    return out;
}

struct Batches {
    at::Tensor ids, labels; // [steps, 2, 8]
};

Batches batches(int steps)
{
    at::manual_seed(82);
    return {at::randint(0, 37, {steps, 2, 8}, at::kLong), at::randint(0, 37, {steps, 2, 8}, at::kLong)};
}

double train_step(accel::Model &m, const Batches &b, int step)
{
    at::Tensor loss = accel::compute_loss(accel::Loss(accel::LossKind::CausalLm), m.forward(b.ids[step]), b.labels[step]);
    loss.backward();
    return loss.item<double>();
}

Grads grads_of(accel::Model &m)
{
    Grads out;
    for (const auto &p : m.parameters()) out.push_back(p.grad().clone());
    return out;
}

// SGD (no state besides the weights and the generators): p -= 0.1 g.
void sgd(accel::Model &m)
{
    at::NoGradGuard no_grad;
    for (const auto &p : m.parameters()) {
        at::Tensor(p).sub_(p.grad() * 0.1);
        at::Tensor(p).mutable_grad().zero_();
    }
}

// One training forward and backward per rank of each model: the gradients by model and rank. The models are split
// at tp 2 (their generators seeded from seed 83) and the default generator's next draw after it is checked to be
// the one it would be without the step.
std::vector<std::vector<Grads>> one_step(const std::vector<std::shared_ptr<accel::Model>> &models)
{
    const Batches b = batches(1);
    at::manual_seed(83);
    const at::Tensor untouched = at::rand({8});
    at::manual_seed(83);
    std::vector<std::vector<Grads>> out(models.size() / 2, std::vector<Grads>(2));
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const size_t r = static_cast<size_t>(comm->rank());
        for (size_t k = 0; k < out.size(); ++k) {
            auto &m = dynamic_cast<accel::LlamaModel &>(*models[2 * k + r]);
            m.apply_tensor_parallel(comm);
            const at::Tensor before = m.tensor_parallel_dropout()->state();
            m.train(true);
            train_step(m, b, 0);
            EXPECT_FALSE(at::equal(m.tensor_parallel_dropout()->state(), before))
                << "rank " << r << ": the heads' dropout did not draw from the rank's generator";
            out[k][r] = grads_of(m);
        }
    });
    EXPECT_TRUE(at::equal(at::rand({8}), untouched))
        << "the split attention's dropout drew from the default generator (every tp rank would draw the same masks)";
    return out;
}

void expect_equal(const Grads &a, const Grads &b, const std::string &what)
{
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << what << ", parameter " << i;
}

// The q_proj slices' gradients of the two ranks (parameter 1: after the embedding), equal iff the masks are.
bool q_grads_equal(const std::vector<Grads> &ranks) { return at::equal(ranks[0][1], ranks[1][1]); }

} // namespace

// Llama's attention dropout at tp 2 draws each rank's heads' masks from that rank's generator: the masks differ
// (with mirrored heads the ranks' q gradients then differ, and without dropout they are equal), the default
// generator is left alone, and a rerun from the same seed - plain, with activation checkpointing or with selective
// recomputation - has the same gradients bit for bit.
TEST(TensorParallelDropoutLlama, HeadsDrawFromTheRankGenerator)
{
    // Without dropout the mirrored heads give equal gradients on the two ranks (what makes the check below mean masks).
    const auto none = split_models(llama_spec(0.0), 2);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dynamic_cast<accel::LlamaModel &>(*none[static_cast<size_t>(comm->rank())]).apply_tensor_parallel(comm);
    });
    {
        const Batches b = batches(1);
        std::vector<Grads> g(2);
        dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
            auto &m = *none[static_cast<size_t>(comm->rank())];
            m.train(true);
            train_step(m, b, 0);
            g[static_cast<size_t>(comm->rank())] = grads_of(m);
        });
        EXPECT_TRUE(q_grads_equal(g)) << "mirrored heads without dropout";
    }
    std::vector<std::shared_ptr<accel::Model>> models;
    for (const std::string &extra : {std::string(), std::string(), std::string(R"(, "activation_checkpointing": true)"),
                                     std::string(R"(, "recompute_granularity": "selective")")})
        for (auto &m : split_models(llama_spec(0.5, extra), 2)) models.push_back(m);
    const auto g = one_step(models);
    EXPECT_FALSE(q_grads_equal(g[0])) << "the tp ranks' heads got the same dropout masks";
    for (size_t r = 0; r < 2; ++r) {
        const std::string rank = "rank " + std::to_string(r);
        expect_equal(g[1][r], g[0][r], rank + ": rerun from the same seed");
        expect_equal(g[2][r], g[0][r], rank + ": activation checkpointing's rerun");
        expect_equal(g[3][r], g[0][r], rank + ": selective recomputation's rerun");
    }
}

// 6 SGD steps with attention dropout at tp 2; the same run saved after step 3 (weights and the tracker states
// save_state writes) and resumed on fresh models continues with the uninterrupted run's losses bit for bit.
TEST(TensorParallelDropoutLlama, ResumesBitForBit)
{
    constexpr int kSteps = 6, kSaved = 3;
    const std::string spec = llama_spec(0.5);
    const Batches b = batches(kSteps);
    const auto run = split_models(spec, 2), resumed = split_models(spec, 2);
    std::vector<std::vector<double>> losses(2, std::vector<double>(kSteps)), again = losses;
    std::vector<std::vector<at::Tensor>> weights(2);
    std::vector<accel::PyRef> states(2);
    at::manual_seed(84);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const size_t r = static_cast<size_t>(comm->rank());
        auto &m = dynamic_cast<accel::LlamaModel &>(*run[r]);
        m.apply_tensor_parallel(comm);
        m.train(true);
        for (int s = 0; s < kSteps; ++s) {
            if (s == kSaved) {
                for (const auto &p : m.parameters()) weights[r].push_back(p.detach().clone());
                states[r] = accel::py_dict();
                tp::add_tracker_states(*states[r], {run[r]});
            }
            losses[r][static_cast<size_t>(s)] = train_step(m, b, s);
            sgd(m);
        }
    });
    at::manual_seed(85); // another seed: only the restored state can give the saved run's masks
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const size_t r = static_cast<size_t>(comm->rank());
        auto &m = dynamic_cast<accel::LlamaModel &>(*resumed[r]);
        m.apply_tensor_parallel(comm);
        m.train(true);
        {
            at::NoGradGuard no_grad;
            for (size_t i = 0; i < weights[r].size(); ++i) at::Tensor(m.parameters()[i]).copy_(weights[r][i]);
        }
        ASSERT_TRUE(states[r]->get("rng_tracker_states") != nullptr) << "save_state keeps no llama tp generator";
        tp::take_tracker_states(*states[r], {resumed[r]}, "random_states")();
        for (int s = kSaved; s < kSteps; ++s) {
            again[r][static_cast<size_t>(s)] = train_step(m, b, s);
            sgd(m);
        }
    });
    for (size_t r = 0; r < 2; ++r)
        for (int s = kSaved; s < kSteps; ++s)
            EXPECT_EQ(again[r][static_cast<size_t>(s)], losses[r][static_cast<size_t>(s)]) << "rank " << r << ", step " << s;
}

namespace {

// A JSON-spec model: a colwise / rowwise pair with a dropout of p_split between them (a split region), a dropout of
// p_replicated after it (the replicated stream), a split transformer_encoder_layer with dropout p_block, a head.
std::string sequential_spec(double p_split, double p_replicated, double p_block)
{
    auto p = [](double v) { return std::to_string(v); };
    return R"({"type": "sequential", "layers": [
        {"type": "linear", "in_features": 6, "out_features": 8, "tp_plan": "colwise"}, {"type": "relu"},
        {"type": "dropout", "p": )" + p(p_split) + R"(},
        {"type": "linear", "in_features": 8, "out_features": 6, "tp_plan": "rowwise"},
        {"type": "dropout", "p": )" + p(p_replicated) + R"(},
        {"type": "transformer_encoder_layer", "d_model": 6, "nhead": 2, "dim_feedforward": 8, "dropout": )" +
           p(p_block) + R"(, "batch_first": true, "tp_plan": "auto"},
        {"type": "linear", "in_features": 6, "out_features": 3}]})";
}

// Rank 1's features of the split pair made copies of rank 0's (layer 0's rows, layer 3's columns): with equal
// masks the ranks' gradients of layer 0's slices are then equal.
std::shared_ptr<accel::Model> mirrored_sequential(const std::string &spec)
{
    at::manual_seed(86);
    auto m = accel::make_model_from_json(spec.c_str());
    at::NoGradGuard no_grad;
    for (const auto &[name, p] : m->named_parameters()) {
        const bool rows = name == "0.weight" || name == "0.bias", cols = name == "3.weight";
        if (!rows && !cols) continue;
        const int64_t dim = cols ? 1 : 0, half = p.size(dim) / 2;
        at::Tensor(p).narrow(dim, half, half).copy_(p.narrow(dim, 0, half));
    }
    return m;
}

struct SequentialRun {
    std::vector<Grads> grads;                   // by rank
    std::vector<at::Tensor> before, after;      // by rank: the tp generator's state around the step
    bool default_untouched = false;             // the default generator's next draw is what it was before the step
};

// One training step at tp 2 of models[rank] (split from seed 87), the default generator checked around it.
SequentialRun sequential_step(const std::vector<std::shared_ptr<accel::Model>> &models,
                              const std::vector<bool> &checkpointed = {})
{
    at::manual_seed(88);
    const at::Tensor x = at::randn({4, 5, 6}), y = at::randn({4, 5, 3});
    at::manual_seed(87);
    const at::Tensor untouched = at::rand({8});
    at::manual_seed(87);
    SequentialRun out;
    out.grads.resize(2);
    out.before.resize(2);
    out.after.resize(2);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const size_t r = static_cast<size_t>(comm->rank());
        auto &m = *models[r];
        if (!checkpointed.empty()) m.set_activation_checkpointing(checkpointed);
        auto &split = dynamic_cast<tp::TensorParallelModel &>(m);
        split.apply_tensor_parallel(comm);
        ASSERT_TRUE(split.tensor_parallel_dropout() != nullptr) << "no tp generator for the JSON-spec model";
        out.before[r] = split.tensor_parallel_dropout()->state();
        m.train(true);
        (m.forward(x) - y).pow(2).mean().backward();
        out.after[r] = split.tensor_parallel_dropout()->state();
        out.grads[r] = grads_of(m);
    });
    out.default_untouched = at::equal(at::rand({8}), untouched);
    return out;
}

std::vector<std::shared_ptr<accel::Model>> two(const std::string &spec)
{
    return {mirrored_sequential(spec), mirrored_sequential(spec)};
}

} // namespace

// A dropout between a colwise and a rowwise layer acts on each rank's features: it draws from the rank's tp
// generator (the masks differ across ranks, the default generator is left alone, a rerun from the seed is the same
// bit for bit), where the plan used to refuse it.
TEST(TensorParallelDropoutSequential, SplitRegionDrawsFromTheRankGenerator)
{
    const SequentialRun none = sequential_step(two(sequential_spec(0.0, 0.0, 0.0)));
    EXPECT_TRUE(at::equal(none.grads[0][0], none.grads[1][0])) << "mirrored features without dropout";
    const SequentialRun a = sequential_step(two(sequential_spec(0.5, 0.0, 0.0)));
    const SequentialRun b = sequential_step(two(sequential_spec(0.5, 0.0, 0.0)));
    EXPECT_FALSE(at::equal(a.grads[0][0], a.grads[1][0])) << "the tp ranks' split features got the same dropout masks";
    EXPECT_TRUE(a.default_untouched) << "the split region's dropout drew from the default generator";
    for (size_t r = 0; r < 2; ++r) {
        EXPECT_FALSE(at::equal(a.after[r], a.before[r])) << "rank " << r << ": the rank's generator drew nothing";
        expect_equal(b.grads[r], a.grads[r], "rank " + std::to_string(r) + ": rerun from the same seed");
    }
}

// A dropout outside the split regions acts on the replicated activation: it draws from the default generator,
// which every rank seeded alike (set_seed) and advances alike, so every rank of a tp group draws the same mask;
// the tp generator is left alone.
TEST(TensorParallelDropoutSequential, ReplicatedRegionDrawsFromTheDefaultGenerator)
{
    const SequentialRun run = sequential_step(two(sequential_spec(0.0, 0.5, 0.0)));
    EXPECT_FALSE(run.default_untouched) << "the replicated dropout did not draw from the default generator";
    for (size_t r = 0; r < 2; ++r)
        EXPECT_TRUE(at::equal(run.after[r], run.before[r])) << "rank " << r << ": the replicated dropout drew from "
                                                               "the rank's generator (the ranks' activations diverge)";
}

// A split transformer_encoder_layer with dropout under activation checkpointing (refused before): the rerun in
// backward sets the tp generator back to its forward state and draws the same heads' and hidden features' masks,
// so after the step the generator is where the step without checkpointing left it (a rerun without the restore
// would have drawn on).
TEST(TensorParallelDropoutSequential, CheckpointedSplitLayerReplaysItsMasks)
{
    const std::vector<bool> block_only = {false, false, false, false, false, true, false};
    const SequentialRun plain = sequential_step(two(sequential_spec(0.0, 0.0, 0.3)));
    const SequentialRun recomputed = sequential_step(two(sequential_spec(0.0, 0.0, 0.3)), block_only);
    for (size_t r = 0; r < 2; ++r) {
        EXPECT_FALSE(at::equal(plain.after[r], plain.before[r])) << "rank " << r << ": the split layer drew nothing";
        EXPECT_TRUE(at::equal(recomputed.after[r], plain.after[r]))
            << "rank " << r << ": activation checkpointing's rerun drew other masks from the tp generator";
    }
}

namespace {

// The generators around one training step at tp 2 of a llama (no attention dropout) with LoRA adapters of
// lora_dropout 0.5 on `target`: whether the rank's generator moved (on both ranks) and whether the default one did.
struct Drawn {
    bool rank = false, default_generator = false;
};

Drawn lora_step(const std::string &target)
{
    const std::string spec = llama_spec(0.0, R"(, "lora": {"r": 2, "lora_dropout": 0.5, "target_modules": [")" + target + R"("]})");
    const auto models = split_models(spec, 2);
    const Batches b = batches(1);
    at::manual_seed(89);
    const at::Tensor untouched = at::rand({8});
    at::manual_seed(89);
    std::vector<int> moved(2, 0);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const size_t r = static_cast<size_t>(comm->rank());
        auto &m = dynamic_cast<accel::LlamaModel &>(*models[r]);
        m.apply_tensor_parallel(comm);
        const at::Tensor before = m.tensor_parallel_dropout()->state();
        m.train(true);
        train_step(m, b, 0);
        moved[r] = at::equal(m.tensor_parallel_dropout()->state(), before) ? 0 : 1;
    });
    EXPECT_EQ(moved[0], moved[1]) << target;
    return {moved[0] == 1, !at::equal(at::rand({8}), untouched)};
}

} // namespace

// LoRA under tp with lora_dropout > 0 (refused before): the dropout acts on the layer's input, which before a
// column-parallel base (q_proj) is replicated - the default generator, one mask on every rank - and before a
// row-parallel base (o_proj) is this rank's features - the rank's tp generator.
TEST(TensorParallelDropoutLlama, LoraDropoutFollowsItsInput)
{
    const Drawn colwise = lora_step("q_proj"), rowwise = lora_step("o_proj");
    EXPECT_TRUE(colwise.default_generator) << "q_proj's adapter (replicated input) did not draw from the default generator";
    EXPECT_FALSE(colwise.rank) << "q_proj's adapter (replicated input) drew from the rank's generator";
    EXPECT_TRUE(rowwise.rank) << "o_proj's adapter (split input) did not draw from the rank's generator";
    EXPECT_FALSE(rowwise.default_generator) << "o_proj's adapter (split input) drew from the default generator";
}
