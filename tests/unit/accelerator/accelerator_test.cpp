// accelerator: accumulate()'s sync rule (training-semantics.md §2), backward's division by the
// accumulation steps (§3), clip_grad_norm / clip_grad_value against LibTorch's own (§6), preparation.
//
// This is the one unit-test file that includes a torch/ header (clip_grad.h, for the reference clipping).
#include "accelerator/accelerator.hpp"
#include "common/error.hpp"
#include "config/optimizer_config.hpp"
#include "config/scheduler_config.hpp"
#include "data_loader/data_loader_shard.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "precision/autocast.hpp"
#include "scheduler/accelerated_scheduler.hpp"
#include "catch_error.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/types.h> // clip_grad.h is not self-contained
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

using accel::Accelerator;
using accel::DataLoaderShard;
using accel::Model;

namespace {

constexpr const char *kMlp = "{\"type\": \"mlp\", \"widths\": [4, 8, 3]}";

std::shared_ptr<Model> make_model(const char *spec = kMlp, uint64_t seed = 0)
{
    at::manual_seed(seed);
    return accel::make_model_from_json(spec);
}

// A second model with the same weights.
std::shared_ptr<Model> clone_model(const Model &m, const char *spec = kMlp)
{
    auto copy = make_model(spec, 12345);
    accel::NamedTensors entries = m.named_parameters();
    for (const auto &b : m.named_buffers()) entries.push_back(b);
    copy->load_state_dict(entries, true);
    return copy;
}

std::shared_ptr<const accel::TensorDataset> dataset(int64_t n)
{
    at::manual_seed(7);
    auto d = std::make_shared<accel::TensorDataset>();
    d->features = at::randn({n, 4});
    d->labels = at::randn({n, 3});
    return d;
}

accel::config::DataLoaderOptions loader_options(int64_t batch_size)
{
    accel::config::DataLoaderOptions o;
    o.batch_size = batch_size;
    return o;
}

at::Tensor mse_loss_of(Model &m, const at::Tensor &x, const at::Tensor &y)
{
    return accel::compute_loss(accel::LossKind::Mse, m.forward(x), y);
}

#define EXPECT_ACCEL_ERROR(stmt, code_, msg_)                                                                          \
    do {                                                                                                               \
        accel::Error e_ = catch_error([&] { stmt; });                                                                  \
        EXPECT_EQ(e_.code(), code_) << e_.what();                                                                      \
        EXPECT_EQ(std::string(e_.what()), std::string(msg_));                                                          \
    } while (0)

struct Trace {
    std::vector<int64_t> steps;
    std::vector<bool> syncs;
};

// One pass of accumulate_begin / accumulate_end per batch, recording step and sync_gradients after entry.
Trace accumulate_over(Accelerator &acc, DataLoaderShard &loader)
{
    Trace t;
    while (auto b = loader.next()) {
        acc.accumulate_begin();
        t.steps.push_back(acc.state()->step);
        t.syncs.push_back(acc.state()->gradient.sync_gradients());
        acc.accumulate_end();
    }
    return t;
}

} // namespace

// ---- accumulate ------------------------------------------------------------------------------------

// training-semantics.md §2: num_steps = 2, a prepared loader of 5 batches.
TEST(Accelerator, AccumulateSyncTable)
{
    Accelerator acc("{\"gradient_accumulation_steps\": 2}");
    DataLoaderShard loader(dataset(5), loader_options(1));
    acc.prepare_dataloader(loader);
    for (int epoch = 0; epoch < 3; ++epoch) {
        SCOPED_TRACE("epoch " + std::to_string(epoch));
        Trace t = accumulate_over(acc, loader);
        EXPECT_EQ(t.steps, (std::vector<int64_t>{1, 2, 3, 4, 0}));
        EXPECT_EQ(t.syncs, (std::vector<bool>{false, true, false, true, true}));
    }
}

TEST(Accelerator, AccumulateSyncTableThreeSteps)
{
    Accelerator acc("{\"gradient_accumulation_plugin\": {\"num_steps\": 3}}");
    DataLoaderShard loader(dataset(7), loader_options(1));
    acc.prepare_dataloader(loader);
    Trace t = accumulate_over(acc, loader);
    EXPECT_EQ(t.steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0}));
    EXPECT_EQ(t.syncs, (std::vector<bool>{false, false, true, false, false, true, true}));
}

TEST(Accelerator, AccumulateWithoutSyncWithDataloader)
{
    Accelerator acc("{\"gradient_accumulation_plugin\": {\"num_steps\": 2, \"sync_with_dataloader\": false}}");
    DataLoaderShard loader(dataset(5), loader_options(1));
    acc.prepare_dataloader(loader);
    Trace first = accumulate_over(acc, loader);
    EXPECT_EQ(first.steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(first.syncs, (std::vector<bool>{false, true, false, true, false}));
    // No reset at the end of the loader: the counter runs on into the next epoch.
    Trace second = accumulate_over(acc, loader);
    EXPECT_EQ(second.steps, (std::vector<int64_t>{6, 7, 8, 9, 10}));
    EXPECT_EQ(second.syncs, (std::vector<bool>{true, false, true, false, true}));
}

TEST(Accelerator, AccumulateOutsideAPreparedLoaderNeverForcesSync)
{
    Accelerator acc("{\"gradient_accumulation_steps\": 2}");
    // An unprepared loader does not register with the gradient state.
    DataLoaderShard loader(dataset(5), loader_options(1));
    Trace t = accumulate_over(acc, loader);
    EXPECT_EQ(t.steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(t.syncs, (std::vector<bool>{false, true, false, true, false}));
}

TEST(Accelerator, AccumulateWithOneStepAlwaysSyncs)
{
    Accelerator acc(nullptr);
    DataLoaderShard loader(dataset(3), loader_options(1));
    acc.prepare_dataloader(loader);
    Trace t = accumulate_over(acc, loader);
    EXPECT_EQ(t.steps, (std::vector<int64_t>{1, 2, 0}));
    EXPECT_EQ(t.syncs, (std::vector<bool>{true, true, true}));
}

TEST(Accelerator, AccumulateCallOrder)
{
    Accelerator acc(nullptr);
    EXPECT_ACCEL_ERROR(acc.accumulate_end(), ACCEL_ERR_FAILED_PRECONDITION,
                       "accumulate_end: no matching accumulate_begin");
    acc.accumulate_begin();
    EXPECT_ACCEL_ERROR(acc.accumulate_begin(), ACCEL_ERR_FAILED_PRECONDITION,
                       "accumulate_begin: already inside accumulate(); call accel_accelerator_accumulate_end first");
    acc.accumulate_end();
    EXPECT_FALSE(acc.state()->in_accumulate);
}

// ---- backward -------------------------------------------------------------------------------------

TEST(Accelerator, BackwardDividesByNumSteps)
{
    for (int64_t steps : {1, 3, 4}) {
        SCOPED_TRACE("steps " + std::to_string(steps));
        Accelerator acc(("{\"gradient_accumulation_steps\": " + std::to_string(steps) + "}").c_str());
        auto a = make_model();
        auto b = clone_model(*a);
        auto data = dataset(6);
        acc.backward(mse_loss_of(*a, data->features, data->labels));
        (mse_loss_of(*b, data->features, data->labels) / static_cast<double>(steps)).backward();
        auto pa = a->parameters(), pb = b->parameters();
        ASSERT_EQ(pa.size(), pb.size());
        for (size_t i = 0; i < pa.size(); ++i) {
            ASSERT_TRUE(pa[i].grad().defined());
            EXPECT_TRUE(at::equal(pa[i].grad(), pb[i].grad())) << a->named_parameters()[i].first;
        }
        // And it is the plain gradient divided by the steps.
        auto c = clone_model(*a);
        mse_loss_of(*c, data->features, data->labels).backward();
        auto pc = c->parameters();
        for (size_t i = 0; i < pa.size(); ++i)
            EXPECT_TRUE(at::allclose(pa[i].grad() * static_cast<double>(steps), pc[i].grad(), 1e-5, 1e-7));
    }
}

TEST(Accelerator, BackwardAccumulatesGradients)
{
    Accelerator acc("{\"gradient_accumulation_steps\": 2}");
    auto a = make_model();
    auto b = clone_model(*a);
    auto data = dataset(4);
    at::Tensor x1 = data->features.slice(0, 0, 2), y1 = data->labels.slice(0, 0, 2);
    at::Tensor x2 = data->features.slice(0, 2, 4), y2 = data->labels.slice(0, 2, 4);
    acc.backward(mse_loss_of(*a, x1, y1));
    acc.backward(mse_loss_of(*a, x2, y2));
    (mse_loss_of(*b, x1, y1) / 2.0).backward();
    (mse_loss_of(*b, x2, y2) / 2.0).backward();
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::equal(pa[i].grad(), pb[i].grad()));
}

TEST(Accelerator, BackwardValidatesTheLoss)
{
    Accelerator acc(nullptr);
    EXPECT_ACCEL_ERROR(acc.backward(at::Tensor()), ACCEL_ERR_INVALID_ARGUMENT, "loss: must not be NULL");
    at::Tensor w = at::ones({2, 2}).requires_grad_(true);
    EXPECT_ACCEL_ERROR(acc.backward(w * 2), ACCEL_ERR_INVALID_ARGUMENT, "loss: expected a scalar, got shape [2, 2]");
    EXPECT_ACCEL_ERROR(acc.backward(at::ones({})), ACCEL_ERR_INVALID_ARGUMENT,
                       "loss: does not require grad (compute it from a model's outputs, e.g. with accel_loss_compute)");
    // A one-element tensor that is not 0-d is accepted, as loss.backward() accepts it.
    EXPECT_NO_THROW(acc.backward((w * 2).sum().view({1})));
    EXPECT_TRUE(at::equal(w.grad(), at::full({2, 2}, 2.0)));
}

// ---- clip_grad_norm / clip_grad_value --------------------------------------------------------------

namespace {

// Detached copies of the model's parameters carrying copies of its gradients.
std::vector<at::Tensor> reference_params(const Model &m)
{
    std::vector<at::Tensor> out;
    for (const auto &p : m.parameters()) {
        at::Tensor q = p.detach().clone().requires_grad_(true);
        if (p.grad().defined()) q.mutable_grad() = p.grad().clone();
        out.push_back(q);
    }
    return out;
}

void fill_grads(Model &m, uint64_t seed)
{
    auto data = dataset(8);
    at::manual_seed(seed);
    mse_loss_of(m, data->features * 3.0, data->labels).backward();
}

} // namespace

TEST(Accelerator, ClipGradNormMatchesLibTorchBitwise)
{
    const double inf = std::numeric_limits<double>::infinity();
    for (double norm_type : {2.0, 1.0, inf, 3.0})
        for (double max_norm : {0.05, 0.5, 1e4, 0.0}) {
            SCOPED_TRACE("norm_type " + std::to_string(norm_type) + " max_norm " + std::to_string(max_norm));
            Accelerator acc(nullptr);
            auto model = make_model();
            acc.prepare_model(*model);
            fill_grads(*model, 1);
            auto ref = reference_params(*model);
            double ours = acc.clip_grad_norm(*model, max_norm, norm_type);
            double theirs = torch::nn::utils::clip_grad_norm_(ref, max_norm, norm_type);
            EXPECT_EQ(ours, theirs);
            EXPECT_GT(ours, 0.0);
            auto params = model->parameters();
            for (size_t i = 0; i < params.size(); ++i)
                EXPECT_TRUE(at::equal(params[i].grad(), ref[i].grad())) << model->named_parameters()[i].first;
        }
}

TEST(Accelerator, ClipGradNormClipsToMaxNorm)
{
    Accelerator acc(nullptr);
    auto model = make_model();
    fill_grads(*model, 2);
    double before = acc.clip_grad_norm(*model, 1e9, 2.0); // nothing clipped: returns the norm
    ASSERT_GT(before, 0.1);
    double again = acc.clip_grad_norm(*model, 0.1, 2.0);
    EXPECT_EQ(again, before); // the returned norm is the one before clipping
    std::vector<at::Tensor> norms;
    for (const auto &p : model->parameters()) norms.push_back(p.grad().norm());
    EXPECT_NEAR(at::stack(norms).norm().item<double>(), 0.1, 1e-5);
}

TEST(Accelerator, ClipGradNormSkipsParamsWithoutGrad)
{
    Accelerator acc(nullptr);
    auto model = make_model();
    fill_grads(*model, 3);
    model->parameters()[1].mutable_grad().reset();
    auto ref = reference_params(*model);
    EXPECT_EQ(acc.clip_grad_norm(*model, 0.01, 2.0), torch::nn::utils::clip_grad_norm_(ref, 0.01, 2.0));
    auto params = model->parameters();
    EXPECT_FALSE(params[1].grad().defined());
    for (size_t i = 0; i < params.size(); ++i)
        if (i != 1) {
            EXPECT_TRUE(at::equal(params[i].grad(), ref[i].grad()));
        }
}

TEST(Accelerator, ClipGradNormSingleParameter)
{
    // One gradient: torch.nn.utils.clip_grad_norm_ (Python) still takes the norm of the stacked norms;
    // LibTorch's C++ port uses the single norm directly. The two agree to rounding.
    const char *spec = "{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", \"in_features\": 4,"
                       " \"out_features\": 3, \"bias\": false}]}";
    for (double norm_type : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
        Accelerator acc(nullptr);
        auto model = make_model(spec);
        fill_grads(*model, 4);
        auto ref = reference_params(*model);
        double ours = acc.clip_grad_norm(*model, 0.01, norm_type);
        double theirs = torch::nn::utils::clip_grad_norm_(ref, 0.01, norm_type);
        EXPECT_NEAR(ours, theirs, 1e-6 * theirs);
        EXPECT_TRUE(at::allclose(model->parameters()[0].grad(), ref[0].grad(), 1e-6, 0.0));
    }
}

TEST(Accelerator, ClipGradNormWithoutGradientsIsZero)
{
    Accelerator acc(nullptr);
    auto model = make_model();
    EXPECT_EQ(acc.clip_grad_norm(*model, 1.0, 2.0), 0.0);
}

TEST(Accelerator, ClipGradNormValidation)
{
    Accelerator acc(nullptr);
    auto model = make_model();
    EXPECT_ACCEL_ERROR(acc.clip_grad_norm(*model, -1.0, 2.0), ACCEL_ERR_INVALID_ARGUMENT,
                       "max_norm: expected a finite number >= 0, got -1.000000");
    EXPECT_ACCEL_ERROR(acc.clip_grad_norm(*model, std::numeric_limits<double>::infinity(), 2.0),
                       ACCEL_ERR_INVALID_ARGUMENT, "max_norm: expected a finite number >= 0, got inf");
    EXPECT_ACCEL_ERROR(acc.clip_grad_norm(*model, std::nan(""), 2.0), ACCEL_ERR_INVALID_ARGUMENT,
                       "max_norm: expected a finite number >= 0, got nan");
    EXPECT_ACCEL_ERROR(acc.clip_grad_norm(*model, 1.0, 0.0), ACCEL_ERR_INVALID_ARGUMENT,
                       "norm_type: expected a number > 0 or INFINITY, got 0.000000");
    EXPECT_ACCEL_ERROR(acc.clip_grad_norm(*model, 1.0, -2.0), ACCEL_ERR_INVALID_ARGUMENT,
                       "norm_type: expected a number > 0 or INFINITY, got -2.000000");
}

TEST(Accelerator, ClipGradValueMatchesLibTorch)
{
    for (double v : {0.0, 0.01, 0.1, 100.0}) {
        SCOPED_TRACE("clip_value " + std::to_string(v));
        Accelerator acc(nullptr);
        auto model = make_model();
        fill_grads(*model, 5);
        auto ref = reference_params(*model);
        acc.clip_grad_value(*model, v);
        torch::nn::utils::clip_grad_value_(ref, v);
        auto params = model->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
            EXPECT_TRUE(at::equal(params[i].grad(), ref[i].grad()));
            EXPECT_LE(params[i].grad().abs().max().item<float>(), static_cast<float>(v)); // fp32 grads
        }
    }
}

TEST(Accelerator, ClipGradValueValidation)
{
    Accelerator acc(nullptr);
    auto model = make_model();
    EXPECT_ACCEL_ERROR(acc.clip_grad_value(*model, -0.5), ACCEL_ERR_INVALID_ARGUMENT,
                       "clip_value: expected a finite number >= 0, got -0.500000");
    EXPECT_ACCEL_ERROR(acc.clip_grad_value(*model, std::numeric_limits<double>::infinity()),
                       ACCEL_ERR_INVALID_ARGUMENT, "clip_value: expected a finite number >= 0, got inf");
    EXPECT_NO_THROW(acc.clip_grad_value(*model, 1.0)); // no gradients: nothing to do
}

// ---- prepare and train_step -------------------------------------------------------------------------

TEST(Accelerator, PrepareBindsToOneAccelerator)
{
    Accelerator a(nullptr), b(nullptr);
    auto model = make_model();
    a.prepare_model(*model);
    EXPECT_EQ(model->prepared_by, a.state());
    EXPECT_NO_THROW(a.prepare_model(*model)); // twice with the same accelerator: a no-op
    EXPECT_ACCEL_ERROR(b.prepare_model(*model), ACCEL_ERR_FAILED_PRECONDITION,
                       "model: already prepared by another accelerator");

    auto opt = std::make_shared<accel::AcceleratedOptimizer>(
        model, accel::config::parse_optimizer_config("{\"type\": \"sgd\", \"lr\": 0.1}"));
    EXPECT_ACCEL_ERROR(b.prepare_optimizer(opt), ACCEL_ERR_FAILED_PRECONDITION,
                       "optimizer's model: already prepared by another accelerator");
    accel::AcceleratedScheduler sched(
        opt, accel::config::parse_scheduler_config("{\"type\": \"linear\", \"num_training_steps\": 10}"));
    EXPECT_ACCEL_ERROR(a.prepare_scheduler(sched), ACCEL_ERR_FAILED_PRECONDITION,
                       "scheduler: its optimizer must be prepared by this accelerator first");
    a.prepare_optimizer(opt);
    a.prepare_optimizer(opt);
    a.prepare_scheduler(sched);
    EXPECT_EQ(sched.prepared_by, a.state());

    DataLoaderShard loader(dataset(4), loader_options(2));
    a.prepare_dataloader(loader);
    EXPECT_NO_THROW(a.prepare_dataloader(loader));
    EXPECT_ACCEL_ERROR(b.prepare_dataloader(loader), ACCEL_ERR_FAILED_PRECONDITION,
                       "dataloader: already prepared by another accelerator");
}

TEST(Accelerator, TrainStepRequiresPreparedObjects)
{
    Accelerator acc(nullptr);
    auto model = make_model();
    auto opt = std::make_shared<accel::AcceleratedOptimizer>(
        model, accel::config::parse_optimizer_config("{\"type\": \"sgd\"}"));
    auto data = dataset(2);
    accel::Batch batch; // (by member: Batch gains fields)
    batch.inputs = data->features;
    batch.labels = data->labels;
    EXPECT_ACCEL_ERROR(acc.train_step(*model, *opt, nullptr, batch, accel::LossKind::Mse),
                       ACCEL_ERR_FAILED_PRECONDITION, "model: not prepared by this accelerator");
    acc.prepare_model(*model);
    EXPECT_ACCEL_ERROR(acc.train_step(*model, *opt, nullptr, batch, accel::LossKind::Mse),
                       ACCEL_ERR_FAILED_PRECONDITION, "optimizer: not prepared by this accelerator");
    acc.prepare_optimizer(opt);
    auto other = make_model();
    acc.prepare_model(*other);
    EXPECT_ACCEL_ERROR(acc.train_step(*other, *opt, nullptr, batch, accel::LossKind::Mse),
                       ACCEL_ERR_INVALID_ARGUMENT, "optimizer: was created over a different model");
    // A failing loss leaves accumulate() closed.
    EXPECT_THROW(acc.train_step(*model, *opt, nullptr, batch, accel::LossKind::CrossEntropy), accel::Error);
    EXPECT_FALSE(acc.state()->in_accumulate);
}

// With num_steps = 2 over 5 batches the optimizer and scheduler act on batches 2, 4 and 5 only, and the
// update equals plain SGD on the mean of the accumulated, divided losses.
TEST(Accelerator, TrainStepAccumulates)
{
    Accelerator acc("{\"gradient_accumulation_steps\": 2}");
    auto model = make_model();
    auto reference = clone_model(*model);
    auto opt = std::make_shared<accel::AcceleratedOptimizer>(
        model, accel::config::parse_optimizer_config("{\"type\": \"sgd\", \"lr\": 0.1}"));
    accel::AcceleratedScheduler sched(opt, accel::config::parse_scheduler_config("{\"type\": \"constant\"}"));
    DataLoaderShard loader(dataset(5), loader_options(1));
    acc.prepare_model(*model);
    acc.prepare_optimizer(opt);
    acc.prepare_scheduler(sched);
    acc.prepare_dataloader(loader);

    std::vector<at::Tensor> pending_grads; // reference: accumulated grads of loss / 2
    auto ref_params = reference->parameters();
    std::vector<bool> changed;
    std::vector<int64_t> sched_steps;
    while (auto b = loader.next()) {
        std::vector<at::Tensor> before;
        for (const auto &p : model->parameters()) before.push_back(p.detach().clone());
        double loss = acc.train_step(*model, *opt, &sched, *b, accel::LossKind::Mse);
        EXPECT_TRUE(std::isfinite(loss));
        bool any = false;
        auto params = model->parameters();
        for (size_t i = 0; i < params.size(); ++i) any = any || !at::equal(before[i], params[i]);
        changed.push_back(any);
        sched_steps.push_back(sched.step_count());

        (mse_loss_of(*reference, b->inputs, b->labels) / 2.0).backward();
        if (acc.state()->gradient.sync_gradients()) {
            at::NoGradGuard no_grad;
            for (auto &p : ref_params) {
                p.sub_(p.grad() * 0.1);
                p.mutable_grad().reset();
            }
        }
        for (size_t i = 0; i < params.size(); ++i)
            EXPECT_TRUE(at::allclose(params[i], ref_params[i], 1e-6, 1e-7));
        // Gradients are cleared (set to None) only on sync steps.
        EXPECT_EQ(params[0].grad().defined(), !acc.state()->gradient.sync_gradients());
    }
    EXPECT_EQ(changed, (std::vector<bool>{false, true, false, true, true}));
    EXPECT_EQ(sched_steps, (std::vector<int64_t>{0, 1, 1, 2, 3}));
}

TEST(Accelerator, Bf16ForwardReturnsFloat)
{
    Accelerator acc("{\"mixed_precision\": \"bf16\"}");
    auto model = make_model();
    acc.prepare_model(*model);
    at::Tensor x = at::randn({2, 4});
    at::Tensor wrapped = accel::forward(*model, x, true);
    EXPECT_EQ(wrapped.scalar_type(), at::kFloat);
    at::Tensor plain = accel::forward(*model, x, false);
    EXPECT_EQ(plain.scalar_type(), at::kFloat);
    EXPECT_FALSE(at::equal(wrapped, plain)); // the wrapped forward ran in bf16
    EXPECT_TRUE(at::allclose(wrapped, plain, 5e-2, 5e-2));
}
