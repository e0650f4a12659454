// ops/loss: each loss against the ATen function torch.nn.functional calls (bitwise) and against its
// formula; dtype and shape validation with codes and messages.
#include "common/error.hpp"
#include "ops/loss.hpp"
#include "catch_error.hpp"

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

using accel::compute_loss;
using accel::LossKind;
using accel::parse_loss_name;

namespace {

const int64_t kMean = at::Reduction::Mean;

#define EXPECT_LOSS_ERROR(stmt, msg_)                                                                                  \
    do {                                                                                                               \
        accel::Error e_ = catch_error([&] { stmt; });                                                                  \
        EXPECT_EQ(e_.code(), ACCEL_ERR_INVALID_ARGUMENT) << e_.what();                                                 \
        EXPECT_EQ(std::string(e_.what()), std::string(msg_));                                                          \
    } while (0)

class LossTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        at::manual_seed(0);
        logits = at::randn({6, 4});
        classes = at::randint(0, 4, {6}, at::kLong);
        outputs = at::randn({6, 3});
        targets = at::randn({6, 3});
        probs = at::rand({6, 3});
    }
    at::Tensor logits, classes, outputs, targets, probs;
};

void expect_same(const at::Tensor &got, const at::Tensor &want)
{
    EXPECT_EQ(got.dim(), 0);
    EXPECT_EQ(got.scalar_type(), want.scalar_type());
    EXPECT_TRUE(at::equal(got, want)) << got.item<double>() << " vs " << want.item<double>();
}

} // namespace

TEST(LossName, AllNames)
{
    EXPECT_EQ(parse_loss_name("cross_entropy"), LossKind::CrossEntropy);
    EXPECT_EQ(parse_loss_name("nll"), LossKind::Nll);
    EXPECT_EQ(parse_loss_name("mse"), LossKind::Mse);
    EXPECT_EQ(parse_loss_name("l1"), LossKind::L1);
    EXPECT_EQ(parse_loss_name("smooth_l1"), LossKind::SmoothL1);
    EXPECT_EQ(parse_loss_name("bce_with_logits"), LossKind::BceWithLogits);
    EXPECT_EQ(parse_loss_name("causal_lm"), LossKind::CausalLm);
    EXPECT_EQ(accel::parse_loss("causal_lm").ignore_index, -100);
    accel::Loss l = accel::parse_loss(R"({"type": "causal_lm", "ignore_index": 0})");
    EXPECT_EQ(l.kind, LossKind::CausalLm);
    EXPECT_EQ(l.ignore_index, 0);
}

TEST(LossName, Errors)
{
    const std::pair<const char *, const char *> unknown[] = {
        {R"({"type": "causal_lm", "ignore": 0})", "loss_name.ignore: unknown key"},
        {R"({"type": "mse", "ignore_index": 0})", "loss_name.ignore_index: unknown key"}};
    for (const auto &[json, msg] : unknown) {
        const auto &spec = json; // C++17 lambdas cannot capture a structured binding (clang refuses)
        accel::Error e = catch_error([&spec] { accel::parse_loss(spec); });
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(std::string(e.what()).rfind(msg, 0), 0u) << e.what();
    }
    EXPECT_LOSS_ERROR(accel::parse_loss(R"({"ignore_index": 0})"), "loss_name.type: required");
    EXPECT_LOSS_ERROR(parse_loss_name(nullptr), "loss_name: must not be NULL");
    EXPECT_LOSS_ERROR(parse_loss_name("MSE"), "loss_name: expected one of \"cross_entropy\", \"nll\", \"mse\", \"l1\", "
                                              "\"smooth_l1\", \"bce_with_logits\", \"causal_lm\" or a JSON object {\"type\": ..., "
                                              "\"ignore_index\": ...}, got \"MSE\"");
    EXPECT_LOSS_ERROR(parse_loss_name(""), "loss_name: expected one of \"cross_entropy\", \"nll\", \"mse\", \"l1\", "
                                           "\"smooth_l1\", \"bce_with_logits\", \"causal_lm\" or a JSON object {\"type\": ..., "
                                              "\"ignore_index\": ...}, got \"\"");
}

TEST_F(LossTest, CrossEntropy)
{
    at::Tensor got = compute_loss(LossKind::CrossEntropy, logits, classes);
    expect_same(got, at::cross_entropy_loss(logits, classes, {}, kMean, -100, 0.0));
    // log_softmax + nll_loss, mean over the batch.
    EXPECT_TRUE(at::allclose(got, at::nll_loss(at::log_softmax(logits, 1), classes)));
    at::Tensor manual = -at::log_softmax(logits, 1).gather(1, classes.unsqueeze(1)).mean();
    EXPECT_TRUE(at::allclose(got, manual));
}

TEST_F(LossTest, Nll)
{
    at::Tensor logp = at::log_softmax(logits, 1);
    at::Tensor got = compute_loss(LossKind::Nll, logp, classes);
    expect_same(got, at::nll_loss(logp, classes, {}, kMean, -100));
    EXPECT_TRUE(at::allclose(got, -logp.gather(1, classes.unsqueeze(1)).mean()));
}

TEST_F(LossTest, IgnoreIndexIsMinus100)
{
    at::Tensor t = classes.clone();
    t[0] = -100;
    at::Tensor got = compute_loss(LossKind::CrossEntropy, logits, t);
    at::Tensor want = compute_loss(LossKind::CrossEntropy, logits.slice(0, 1), classes.slice(0, 1));
    EXPECT_TRUE(at::allclose(got, want));
}

TEST_F(LossTest, Mse)
{
    at::Tensor got = compute_loss(LossKind::Mse, outputs, targets);
    expect_same(got, at::mse_loss(outputs, targets, kMean));
    EXPECT_TRUE(at::allclose(got, (outputs - targets).pow(2).mean()));
}

TEST_F(LossTest, L1)
{
    at::Tensor got = compute_loss(LossKind::L1, outputs, targets);
    expect_same(got, at::l1_loss(outputs, targets, kMean));
    EXPECT_TRUE(at::allclose(got, (outputs - targets).abs().mean()));
}

TEST_F(LossTest, SmoothL1WithBetaOne)
{
    at::Tensor got = compute_loss(LossKind::SmoothL1, outputs, targets);
    expect_same(got, at::smooth_l1_loss(outputs, targets, kMean, 1.0));
    at::Tensor d = (outputs - targets).abs();
    at::Tensor manual = at::where(d < 1.0, 0.5 * d * d, d - 0.5).mean();
    EXPECT_TRUE(at::allclose(got, manual));
}

TEST_F(LossTest, BceWithLogits)
{
    at::Tensor got = compute_loss(LossKind::BceWithLogits, outputs, probs);
    expect_same(got, at::binary_cross_entropy_with_logits(outputs, probs, {}, {}, kMean));
    at::Tensor manual = (at::clamp_min(outputs, 0) - outputs * probs + at::log1p(at::exp(-outputs.abs()))).mean();
    EXPECT_TRUE(at::allclose(got, manual));
}

TEST_F(LossTest, TargetsConvertedToOutputDtype)
{
    at::Tensor got = compute_loss(LossKind::Mse, outputs, targets.to(at::kDouble));
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    expect_same(got, at::mse_loss(outputs, targets.to(at::kDouble).to(at::kFloat), kMean));
    at::Tensor dbl = compute_loss(LossKind::L1, outputs.to(at::kDouble), targets);
    EXPECT_EQ(dbl.scalar_type(), at::kDouble);
}

TEST_F(LossTest, GradientsFlow)
{
    at::Tensor x = outputs.clone().requires_grad_(true);
    compute_loss(LossKind::Mse, x, targets).backward();
    EXPECT_TRUE(at::allclose(x.grad(), 2.0 * (outputs - targets) / outputs.numel()));
}

TEST_F(LossTest, MissingTensors)
{
    EXPECT_LOSS_ERROR(compute_loss(LossKind::Mse, at::Tensor(), targets), "outputs: missing");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::Mse, outputs, at::Tensor()), "targets: missing (the batch has no labels)");
}

TEST_F(LossTest, OutputsMustBeFloating)
{
    EXPECT_LOSS_ERROR(compute_loss(LossKind::Mse, at::ones({6, 3}, at::kLong), targets),
                      "outputs: mse needs floating outputs, got Long");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::CrossEntropy, at::ones({6, 4}, at::kInt), classes),
                      "outputs: cross_entropy needs floating outputs, got Int");
}

TEST_F(LossTest, ClassIndexValidation)
{
    EXPECT_LOSS_ERROR(compute_loss(LossKind::CrossEntropy, logits, classes.to(at::kFloat)),
                      "targets: cross_entropy needs int64 class indices, got Float");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::Nll, logits, classes.to(at::kInt)),
                      "targets: nll needs int64 class indices, got Int");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::CrossEntropy, logits, at::zeros({5}, at::kLong)),
                      "targets: cross_entropy needs outputs [N, C] and targets [N], got outputs [6, 4] and targets [5]");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::Nll, logits.view({6, 2, 2}), classes),
                      "targets: nll needs outputs [N, C] and targets [N], got outputs [6, 2, 2] and targets [6]");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::CrossEntropy, logits, classes.view({6, 1})),
                      "targets: cross_entropy needs outputs [N, C] and targets [N], got outputs [6, 4] and targets [6, 1]");
}

TEST_F(LossTest, RegressionTargetValidation)
{
    EXPECT_LOSS_ERROR(compute_loss(LossKind::Mse, outputs, at::zeros({6, 3}, at::kLong)),
                      "targets: mse needs floating targets, got Long");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::BceWithLogits, outputs, at::zeros({6, 3}, at::kBool)),
                      "targets: bce_with_logits needs floating targets, got Bool");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::L1, outputs, at::zeros({6})),
                      "targets: l1 needs targets of the outputs' shape [6, 3], got [6]");
    // No broadcasting (F.mse_loss would only warn).
    EXPECT_LOSS_ERROR(compute_loss(LossKind::SmoothL1, outputs, at::zeros({1, 3})),
                      "targets: smooth_l1 needs targets of the outputs' shape [6, 3], got [1, 3]");
}

TEST(CausalLmLoss, IsCrossEntropyOverEveryPositionWithIgnoreIndex)
{
    at::manual_seed(0);
    at::Tensor logits = at::randn({2, 5, 7});
    at::Tensor labels = at::randint(0, 7, {2, 5}, at::kLong);
    labels[0][1] = -100;
    labels[1][4] = -100;
    at::Tensor got = compute_loss(LossKind::CausalLm, logits, labels);
    // By hand: mean over the 8 counted positions of -log softmax(logits)[label].
    at::Tensor logp = at::log_softmax(logits, -1);
    double sum = 0;
    int n = 0;
    for (int b = 0; b < 2; ++b)
        for (int t = 0; t < 5; ++t) {
            int64_t y = labels[b][t].item<int64_t>();
            if (y == -100) continue;
            sum -= logp[b][t][y].item<double>();
            ++n;
        }
    EXPECT_EQ(n, 8);
    EXPECT_NEAR(got.item<double>(), sum / n, 1e-6);
    accel::Loss other = LossKind::CausalLm;
    other.ignore_index = 7; // not a class: only the positions set to it are ignored
    at::Tensor l2 = labels.clone();
    l2.masked_fill_(l2.eq(-100), 7);
    EXPECT_NEAR(compute_loss(other, logits, l2).item<double>(), sum / n, 1e-6);
    EXPECT_LOSS_ERROR(compute_loss(LossKind::CausalLm, logits, labels.view({10})),
                      "targets: causal_lm needs outputs [..., V] and targets [...] of the outputs' leading shape, got "
                      "outputs [2, 5, 7] and targets [10]");
    EXPECT_LOSS_ERROR(compute_loss(LossKind::CausalLm, logits, labels.to(at::kInt)),
                      "targets: causal_lm needs int64 token ids, got Int");
}
