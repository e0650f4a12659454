// Sequence parallelism in JSON-spec sequential models (issue 33), on 2 ranks played by threads: a run of "auto"
// transformer_encoder_layer blocks computes on this rank's 1/tp of the positions (scattered before the first split
// block, gathered after the last), in both layouts (batch_first [B, T, C] and PyTorch's [T, B, C]).
//  - EqualsOneProcess: the loss and every parameter's gradient equal one process's (the norms' gradients summed over
//    tp), batched and unbatched ([T, C]) inputs; a length that does not divide by tp refused by name.
//  - TrainingEqualsOneProcess: 20 AdamW steps through prepare's plan (tp_handler.sequence_parallel) end with one
//    process's parameters within 1e-5.
//  - RefusesWhatItCannotSplit: split linear layers, a layer norm or a replicated block between the split blocks,
//    blocks of two layouts: UNIMPLEMENTED naming the layer and tp_handler.sequence_parallel, before anything is split.
#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_model.hpp"
#include "parallel_test_support.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

constexpr int32_t kTp = 2;

// A replicated linear into two split blocks (a relu and a dropout between them: they run on the shard), a
// replicated head after them.
std::string sp_spec(bool batch_first)
{
    const std::string bf = batch_first ? "true" : "false";
    return R"({"type": "sequential", "layers": [
        {"type": "linear", "in_features": 6, "out_features": 16},
        {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 24, "dropout": 0,
         "activation": "gelu", "batch_first": )" + bf + R"(, "tp_plan": "auto"},
        {"type": "relu"}, {"type": "dropout", "p": 0},
        {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 24, "dropout": 0,
         "batch_first": )" + bf + R"(, "tp_plan": "auto"},
        {"type": "linear", "in_features": 16, "out_features": 3}]})";
}

// Copies from one seed, in float64 (the split's reordered sums stay far below the tolerance after AdamW).
std::vector<std::shared_ptr<accel::Model>> copies(const std::string &spec, int n)
{
    std::vector<std::shared_ptr<accel::Model>> out;
    for (int i = 0; i < n; ++i) {
        at::manual_seed(51);
        auto m = accel::make_model_from_json(spec.c_str());
        m->train(false);
        at::NoGradGuard no_grad;
        for (const auto &p : m->parameters()) at::Tensor(p).set_data(p.detach().to(at::kDouble));
        out.push_back(std::move(m));
    }
    return out;
}

// [B, T, 6] with batch_first, [T, B, 6] without: T = 8 positions, B = 2.
at::Tensor inputs(bool batch_first, std::vector<int64_t> lead = {})
{
    lead.push_back(batch_first ? 2 : 8);
    lead.push_back(batch_first ? 8 : 2);
    lead.push_back(6);
    return at::randn(lead, at::kDouble);
}

void expect_refused(const std::function<void()> &f, accel_status_t code, const std::string &what)
{
    try {
        f();
        ADD_FAILURE() << "accepted; expected: " << what;
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
}

void check_gradients(bool batch_first)
{
    auto models = copies(sp_spec(batch_first), kTp + 1);
    at::manual_seed(52);
    const at::Tensor x = inputs(batch_first), y = at::randn({x.size(0), x.size(1), 3}, at::kDouble);
    const at::Tensor x2 = x.select(batch_first ? 0 : 1, 0), y2 = y.select(batch_first ? 0 : 1, 0); // [T, C]
    auto &ref = *models.back();
    const at::Tensor want = at::mse_loss(ref.forward(x), y) + at::mse_loss(ref.forward(x2), y2);
    want.backward();
    dist::run_on_threads(kTp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        auto &m = *models[static_cast<size_t>(r)];
        auto &planned = dynamic_cast<tp::TensorParallelModel &>(m);
        planned.enable_sequence_parallel();
        planned.apply_tensor_parallel(comm);
        const at::Tensor out = m.forward(x);
        EXPECT_EQ(out.sizes(), y.sizes()) << "the positions are gathered after the last split block";
        at::Tensor loss = at::mse_loss(out, y) + at::mse_loss(m.forward(x2), y2);
        EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-5 * std::abs(want.item<double>())) << "rank " << r;
        loss.backward();
        const auto &plan = planned.tensor_parallel_slicing();
        for (size_t i = 0; i < m.named_parameters().size(); ++i) {
            const auto &[name, p] = m.named_parameters()[i];
            const at::Tensor &whole = ref.named_parameters()[i].second.grad();
            auto it = plan.find(name);
            const at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, r, kTp);
            accel_test::expect_close(p.grad(), mine, name + " gradient (rank " + std::to_string(r) + ")",
                                     accel_test::rel_tol(whole));
        }
        // 7 positions do not divide over 2 ranks.
        expect_refused([&] { m.forward(x.narrow(batch_first ? 1 : 0, 0, 7)); }, ACCEL_ERR_INVALID_ARGUMENT,
                       "sequential: input: sequence length 7 does not divide by tp_size (2)");
    });
}

void check_training(bool batch_first)
{
    constexpr int kSteps = 20;
    auto models = copies(sp_spec(batch_first), kTp + 1);
    at::manual_seed(53);
    const at::Tensor x = inputs(batch_first, {kSteps}), y = at::randn({kSteps, x.size(1), x.size(2), 3}, at::kDouble);
    auto adamw = [](accel::Model &m) {
        return torch::optim::AdamW(m.parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
    };
    auto &ref = *models.back();
    auto ref_opt = adamw(ref);
    std::vector<double> ref_loss;
    for (int s = 0; s < kSteps; ++s) {
        at::Tensor loss = at::mse_loss(ref.forward(x[s]), y[s]);
        ref_loss.push_back(loss.item<double>());
        loss.backward();
        ref_opt.step();
        ref_opt.zero_grad();
    }
    dist::run_on_threads(kTp, [&](const std::shared_ptr<dist::Communicator> &comm) {
        dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, kTp), comm);
        auto &m = *models[static_cast<size_t>(comm->rank())];
        auto wrapper = tp::prepare_tensor_parallel(m, mesh, accel::config::DistributedDataParallelKwargs{},
                                                   /*sequence_parallel=*/true);
        auto opt = adamw(m);
        for (int s = 0; s < kSteps; ++s) {
            at::Tensor loss = at::mse_loss(m.forward(x[s]), y[s]);
            EXPECT_NEAR(loss.item<double>(), ref_loss[static_cast<size_t>(s)], 1e-5 * ref_loss[static_cast<size_t>(s)])
                << "step " << s;
            loss.backward();
            wrapper->finish_backward();
            opt.step();
            opt.zero_grad();
        }
        const auto &plan = accel_test::plan_of(m);
        EXPECT_EQ(plan.size(), 2u * 6u) << "each block's six split tensors";
        for (size_t j = 0; j < m.named_parameters().size(); ++j) {
            const auto &[name, p] = m.named_parameters()[j];
            const at::Tensor &whole = ref.named_parameters()[j].second;
            auto it = plan.find(name);
            const at::Tensor mine = it == plan.end() ? whole : tp::slice_parameter(whole, it->second, comm->rank(), kTp);
            accel_test::expect_close(p, mine, name + " after training", accel_test::rel_tol(whole));
        }
    });
}

} // namespace

TEST(SequenceParallelSequential, EqualsOneProcess)
{
    for (const bool batch_first : {true, false}) check_gradients(batch_first);
}

TEST(SequenceParallelSequential, TrainingEqualsOneProcess)
{
    for (const bool batch_first : {true, false}) check_training(batch_first);
}

TEST(SequenceParallelSequential, RefusesWhatItCannotSplit)
{
    const std::string block = R"({"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 8,
        "dropout": 0, "tp_plan": "auto")";
    auto seq = [](const std::string &layers) { return R"({"type": "sequential", "layers": [)" + layers + "]}"; };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {seq(R"({"type": "linear", "in_features": 8, "out_features": 8, "tp_plan": "colwise"}, {"type": "relu"},
                {"type": "linear", "in_features": 8, "out_features": 8, "tp_plan": "rowwise"}, )" + block + "}"),
         "layers[0] (linear, tp_plan \"colwise\"): a split linear layer under sequence parallelism is not built yet"},
        {seq(block + R"(}, {"type": "layer_norm", "normalized_shape": [8]}, )" + block + "}"),
         "layers[1] (layer_norm): sits between split transformer blocks"},
        {seq(block + "}, " + block + R"(, "batch_first": true})"),
         "layers[1] (transformer_encoder_layer, tp_plan \"auto\"): its batch_first differs from layers[0]'s"},
        {seq(block + R"(}, {"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dropout": 0,
                "tp_plan": "replicate"}, )" + block + "}"),
         "layers[1] (transformer_encoder_layer, tp_plan \"replicate\"): sits between split transformer blocks"},
    };
    for (const auto &c : cases) {
        // Not a structured binding: C++17 lambdas cannot capture those (clang refuses).
        const std::string &spec = c.first, &what = c.second;
        auto models = copies(spec, kTp);
        dist::run_on_threads(kTp, [&](const std::shared_ptr<dist::Communicator> &comm) {
            dist::DeviceMesh mesh(dist::mesh_shape(1, 1, 1, kTp), comm);
            auto &m = *models[static_cast<size_t>(comm->rank())];
            expect_refused([&] { tp::prepare_tensor_parallel(m, mesh, {}, true); }, ACCEL_ERR_UNIMPLEMENTED,
                           "parallelism_config.tp_handler.sequence_parallel: " + what);
            EXPECT_TRUE(accel_test::plan_of(m).empty()) << "nothing split before the refusal";
        });
    }
}
