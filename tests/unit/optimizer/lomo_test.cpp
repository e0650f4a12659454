// lomo / adalomo with Accelerator::lomo_backward: the weights after several steps equal a hand-written
// reference of each update rule (LOMO: SGD with weight decay and the two clippings; AdaLomo: Adafactor's
// factored second moments, update RMS clipping, a step relative to the parameter's RMS), computed here from
// whole gradients of a copy of the model; no gradient is stored and at most one is alive inside the hooks;
// the refusals name their reason.
#include "accelerator/accelerator.hpp"
#include "common/error.hpp"
#include "config/optimizer_config.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "optimizer/lomo.hpp"
#include "catch_error.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

using accel::Accelerator;
using accel::Model;

namespace {

// Linear weights (2-D: AdaLomo's factored moments) and biases (1-D: its plain second moment).
constexpr const char *kMlp = "{\"type\": \"mlp\", \"widths\": [5, 7, 6, 3]}";

std::shared_ptr<Model> make_model(uint64_t seed = 0)
{
    at::manual_seed(seed);
    return accel::make_model_from_json(kMlp);
}

std::shared_ptr<Model> clone_model(const Model &m)
{
    auto copy = make_model(999);
    copy->load_state_dict(m.named_parameters(), true);
    return copy;
}

struct Batch {
    at::Tensor x, y;
};

Batch batch(int step)
{
    at::manual_seed(100 + step);
    return {at::randn({8, 5}), at::randn({8, 3})};
}

at::Tensor loss_of(Model &m, const Batch &b) { return accel::compute_loss(accel::LossKind::Mse, m.forward(b.x), b.y); }

// The whole gradients of the reference copy, by plain backward.
std::vector<at::Tensor> whole_grads(Model &m, const Batch &b)
{
    for (auto &p : m.parameters()) p.mutable_grad().reset();
    loss_of(m, b).backward();
    std::vector<at::Tensor> g;
    for (auto &p : m.parameters()) g.push_back(p.grad().clone());
    return g;
}

// min(max_norm / (norm of all gradients + 1e-6), 1), LOMO's grad_norm.
double clip_coef(const std::vector<at::Tensor> &grads, double max_norm)
{
    double sq = 0;
    for (const auto &g : grads) sq += g.pow(2).sum().item<double>();
    return std::min(max_norm / (std::sqrt(sq) + 1e-6), 1.0);
}

struct Hyper {
    double wd = 0, clip_norm = 0, clip_value = 0;
    double eps = 1e-30, eps2 = 1e-3, clip_threshold = 1.0, decay_rate = -0.8;
};

std::vector<at::Tensor> clipped(std::vector<at::Tensor> grads, const Hyper &h)
{
    const double coef = h.clip_norm > 0 ? clip_coef(grads, h.clip_norm) : 1.0;
    for (auto &g : grads) {
        if (h.clip_value > 0) g = g.clamp(-h.clip_value, h.clip_value);
        if (h.clip_norm > 0) g = g * coef;
    }
    return grads;
}

void lomo_reference_step(Model &m, const Batch &b, double lr, const Hyper &h)
{
    auto grads = clipped(whole_grads(m, b), h);
    at::NoGradGuard no_grad;
    auto params = m.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor p = params[i].detach();
        p.copy_(p * (1 - lr * h.wd) - lr * grads[i]);
    }
}

// AdaLomo's state in the reference: per parameter, v (1-D) or the row and column means (2-D).
struct AdaRef {
    std::map<size_t, at::Tensor> v, row, col;
    int64_t step = 0;
};

void adalomo_reference_step(Model &m, const Batch &b, double lr, const Hyper &h, AdaRef &s)
{
    auto grads = clipped(whole_grads(m, b), h);
    at::NoGradGuard no_grad;
    s.step += 1;
    const double beta2 = 1.0 - std::pow(static_cast<double>(s.step), h.decay_rate);
    auto params = m.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor p = params[i].detach(), g = grads[i];
        at::Tensor sq = g * g + h.eps, u;
        if (p.dim() == 2) {
            if (!s.row.count(i)) s.row[i] = at::zeros({p.size(0)}), s.col[i] = at::zeros({p.size(1)});
            s.row[i] = beta2 * s.row[i] + (1 - beta2) * sq.mean(1);
            s.col[i] = beta2 * s.col[i] + (1 - beta2) * sq.mean(0);
            // v[r][c] ~ row[r] * col[c] / mean(row)
            at::Tensor v = at::outer(s.row[i] / s.row[i].mean(), s.col[i]);
            u = g / v.sqrt();
        } else {
            if (!s.v.count(i)) s.v[i] = at::zeros_like(p);
            s.v[i] = beta2 * s.v[i] + (1 - beta2) * sq;
            u = g / s.v[i].sqrt();
        }
        const double rms = std::sqrt(u.pow(2).mean().item<double>());
        u = u / std::max(rms / h.clip_threshold, 1.0);
        const double p_rms = std::sqrt(p.pow(2).mean().item<double>());
        const double step_lr = lr * std::max(h.eps2, p_rms);
        p.copy_(p * (1 - step_lr * h.wd) - step_lr * u);
    }
}

std::string config_json(const std::string &type, const Hyper &h)
{
    std::string j = "{\"type\": \"" + type + "\", \"weight_decay\": " + std::to_string(h.wd);
    if (h.clip_norm > 0) j += ", \"clip_grad_norm\": " + std::to_string(h.clip_norm);
    if (h.clip_value > 0) j += ", \"clip_grad_value\": " + std::to_string(h.clip_value);
    return j + "}";
}

// Three lomo_backward steps with changing learning rates against the reference; returns the optimizer.
std::shared_ptr<accel::AcceleratedOptimizer> check_against_reference(const std::string &type, const Hyper &h)
{
    Accelerator acc(nullptr);
    auto model = make_model();
    auto ref = clone_model(*model);
    auto opt = std::make_shared<accel::AcceleratedOptimizer>(model, accel::config::parse_optimizer_config(config_json(type, h).c_str()));
    acc.prepare_model(model);
    acc.prepare_optimizer(opt);
    AdaRef state;
    for (int step = 0; step < 4; ++step) {
        const double lr = type == "lomo" ? 0.05 / (step + 1) : 0.02 / (step + 1);
        const Batch b = batch(step);
        acc.lomo_backward(loss_of(*model, b), lr);
        if (type == "lomo") lomo_reference_step(*ref, b, lr, h);
        else adalomo_reference_step(*ref, b, lr, h, state);
    }
    auto got = model->named_parameters(), want = ref->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
        const double diff = (got[i].second - want[i].second).abs().max().item<double>();
        EXPECT_LT(diff, 1e-6) << type << " " << got[i].first;
        EXPECT_FALSE(got[i].second.grad().defined()) << got[i].first << ": a gradient was stored";
    }
    // And the update did something (a broken hook that never runs would leave the weights as they were).
    EXPECT_GT((got[0].second - make_model()->named_parameters()[0].second).abs().max().item<double>(), 1e-4);
    return opt;
}

} // namespace

TEST(Lomo, MatchesReference)
{
    check_against_reference("lomo", {});
    check_against_reference("lomo", Hyper{0.1, 0, 0});
}

TEST(Lomo, ClipsByNormAndValue)
{
    // Small enough thresholds that both clippings act on every step.
    check_against_reference("lomo", Hyper{0, 0.05, 0});
    check_against_reference("lomo", Hyper{0, 0, 0.01});
    check_against_reference("lomo", Hyper{0.01, 0.05, 0.01});
}

TEST(AdaLomo, MatchesReference)
{
    check_against_reference("adalomo", {});
    check_against_reference("adalomo", Hyper{0.1, 0.05, 0.01});
}

TEST(Lomo, HoldsAtMostOneGradient)
{
    auto opt = check_against_reference("lomo", {});
    int64_t largest = 0;
    for (const auto &p : opt->model()->parameters()) largest = std::max<int64_t>(largest, p.numel() * p.element_size());
    auto &lomo = dynamic_cast<accel::LomoOptimizer &>(opt->torch_optimizer());
    EXPECT_GT(lomo.peak_gradient_bytes(), 0);
    EXPECT_LE(lomo.peak_gradient_bytes(), largest);
}

TEST(AdaLomo, StateDictCarriesTheMoments)
{
    auto opt = check_against_reference("adalomo", {});
    auto sd = opt->state_dict(); // no "unknown optimizer type": the state dict table knows adalomo
    auto fresh = std::make_shared<accel::AcceleratedOptimizer>(opt->model(), opt->config());
    auto apply = fresh->load_state_dict(*sd, "optimizer.bin", [](const at::Tensor &d, const at::Tensor &s) { d.copy_(s); });
    apply();
    const auto a = opt->state_tensors(opt->params()[0]), b = fresh->state_tensors(fresh->params()[0]);
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    EXPECT_FALSE(a[0].defined());
    EXPECT_TRUE(at::equal(a[1], b[1]));
    EXPECT_TRUE(at::equal(a[2], b[2]));
}

TEST(Lomo, Refusals)
{
    const Batch b = batch(0);
    {
        Accelerator acc(nullptr);
        auto model = make_model();
        acc.prepare_model(model);
        auto e = catch_error([&] { acc.lomo_backward(loss_of(*model, b), 0.1); });
        EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
        EXPECT_NE(std::string(e.what()).find("no prepared optimizer is of type \"lomo\""), std::string::npos) << e.what();
    }
    {
        Accelerator acc("{\"gradient_accumulation_steps\": 2}");
        auto model = make_model();
        auto opt = std::make_shared<accel::AcceleratedOptimizer>(model, accel::config::parse_optimizer_config("{\"type\": \"lomo\"}"));
        acc.prepare_model(model);
        acc.prepare_optimizer(opt);
        auto e = catch_error([&] { acc.lomo_backward(loss_of(*model, b), 0.1); });
        EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
        EXPECT_NE(std::string(e.what()).find("gradient_accumulation_steps is 2"), std::string::npos) << e.what();
    }
    Accelerator acc(nullptr);
    auto model = make_model();
    auto opt = std::make_shared<accel::AcceleratedOptimizer>(model, accel::config::parse_optimizer_config("{\"type\": \"adalomo\"}"));
    acc.prepare_model(model);
    acc.prepare_optimizer(opt);
    for (double lr : {-1.0, static_cast<double>(NAN), static_cast<double>(INFINITY)}) {
        auto e = catch_error([&] { acc.lomo_backward(loss_of(*model, b), lr); });
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("learning_rate: expected a finite number >= 0"), std::string::npos) << e.what();
    }
    auto e = catch_error([&] { opt->step(); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("accel_accelerator_lomo_backward"), std::string::npos) << e.what();
    // The same graph twice: named as a call-order mistake, and no hook is left behind on the parameters.
    at::Tensor loss = loss_of(*model, b);
    acc.lomo_backward(loss, 0.1);
    e = catch_error([&] { acc.lomo_backward(loss, 0.1); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION) << e.what();
    loss_of(*model, b).backward(); // a plain backward afterwards stores gradients again
    for (const auto &p : model->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(Lomo, RefusedUnderSharding)
{
    // One process is enough for the engine to shard (a world of one); prepare refuses the lomo optimizer.
    Accelerator acc("{\"fsdp_plugin\": {\"sharding_strategy\": \"FULL_SHARD\"}}");
    auto model = make_model();
    auto opt = std::make_shared<accel::AcceleratedOptimizer>(model, accel::config::parse_optimizer_config("{\"type\": \"lomo\"}"));
    acc.prepare_model(model);
    auto e = catch_error([&] { acc.prepare_optimizer(opt); });
    EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED) << e.what();
    EXPECT_NE(std::string(e.what()).find("under fsdp_plugin / deepspeed_plugin"), std::string::npos) << e.what();
}

TEST(Lomo, ConfigErrors)
{
    auto code_and_message = [](const char *json) {
        return catch_error([&] { accel::config::parse_optimizer_config(json); });
    };
    struct Case {
        const char *json;
        accel_status_t code;
        const char *message;
    };
    for (const Case &c : std::vector<Case>{
             {"{\"type\": \"lomo\", \"clip_grad_norm\": 0}", ACCEL_ERR_INVALID_ARGUMENT, "clip_grad_norm"},
             {"{\"type\": \"lomo\", \"clip_grad_value\": -1}", ACCEL_ERR_INVALID_ARGUMENT, "clip_grad_value"},
             {"{\"type\": \"lomo\", \"eps\": [1e-30, 1e-3]}", ACCEL_ERR_INVALID_ARGUMENT, "eps"},
             {"{\"type\": \"adalomo\", \"eps\": [1e-30]}", ACCEL_ERR_INVALID_ARGUMENT, "eps: expected 2 numbers"},
             {"{\"type\": \"adalomo\", \"decay_rate\": 0.5}", ACCEL_ERR_INVALID_ARGUMENT, "decay_rate"},
             {"{\"type\": \"adalomo\", \"clip_threshold\": 0}", ACCEL_ERR_INVALID_ARGUMENT, "clip_threshold"},
             {"{\"type\": \"lomo\", \"param_groups\": [{\"lr\": 1}]}", ACCEL_ERR_UNIMPLEMENTED,
              "param_groups: not supported with lomo"},
         }) {
        auto e = code_and_message(c.json);
        EXPECT_EQ(e.code(), c.code) << c.json << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.json << ": " << e.what();
    }
}
