// precision/grad_scaler: PyTorch's GradScaler algorithm (training-semantics.md §5) step by step on
// scripted sequences of finite and non-finite gradients.
#include "common/error.hpp"
#include "precision/grad_scaler.hpp"
#include "catch_error.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

using accel::GradScaler;
using accel::config::GradScalerKwargs;

namespace {

GradScalerKwargs kwargs(double init_scale = 65536.0, int64_t interval = 2000, double growth = 2.0, double backoff = 0.5)
{
    GradScalerKwargs k;
    k.init_scale = init_scale;
    k.growth_interval = interval;
    k.growth_factor = growth;
    k.backoff_factor = backoff;
    return k;
}

// One "parameter" whose gradient each step sets directly (what backward of a scaled loss would leave).
struct Fixture {
    explicit Fixture(GradScaler &s) : scaler(s)
    {
        param = at::zeros({3}).set_requires_grad(true);
        params = {param};
        // The scale tensor is created by the first scale() call, as in PyTorch.
        (void)scaler.scale(at::ones({}));
    }
    void set_grad(float value) { param.mutable_grad() = at::full({3}, value); }
    // A whole optimizer step: scaler.step then scaler.update (what AcceleratedOptimizer::step does).
    bool step()
    {
        bool ran = false;
        bool stepped = scaler.step(this, params, [&] { ran = true; });
        EXPECT_EQ(stepped, ran);
        scaler.update();
        return stepped;
    }
    GradScaler &scaler;
    at::Tensor param;
    std::vector<at::Tensor> params;
};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

} // namespace

TEST(GradScaler, Defaults)
{
    GradScaler s{GradScalerKwargs{}};
    EXPECT_TRUE(s.is_enabled());
    EXPECT_EQ(s.get_scale(), 65536.0); // init_scale before the first scale()
    EXPECT_EQ(s.get_growth_tracker(), 0);
    auto st = s.state();
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->scale, 65536.0);
    EXPECT_EQ(st->growth_factor, 2.0);
    EXPECT_EQ(st->backoff_factor, 0.5);
    EXPECT_EQ(st->growth_interval, 2000);
    EXPECT_EQ(st->growth_tracker, 0);
}

TEST(GradScaler, ScaleMultipliesInFloat32)
{
    GradScaler s{kwargs(1024.0)};
    at::Tensor loss = at::full({}, 0.75, at::kFloat).set_requires_grad(true);
    at::Tensor scaled = s.scale(loss);
    EXPECT_EQ(scaled.scalar_type(), at::kFloat);
    EXPECT_EQ(scaled.item<float>(), 768.0f);
    scaled.backward();
    EXPECT_EQ(loss.grad().item<float>(), 1024.0f); // the backward seed is multiplied by the scale
}

// The spec's test vector: growth_interval 2000.
TEST(GradScaler, SpecVectorGrowthAfter2000CleanSteps)
{
    GradScaler s{GradScalerKwargs{}};
    Fixture f(s);
    for (int i = 1; i <= 1999; ++i) {
        f.set_grad(1.0f);
        ASSERT_TRUE(f.step());
    }
    EXPECT_EQ(s.get_scale(), 65536.0);
    EXPECT_EQ(s.get_growth_tracker(), 1999);
    f.set_grad(1.0f);
    EXPECT_TRUE(f.step());
    EXPECT_EQ(s.get_scale(), 131072.0);
    EXPECT_EQ(s.get_growth_tracker(), 0);
    // An overflow from there backs off to 65536.
    f.set_grad(kInf);
    EXPECT_FALSE(f.step());
    EXPECT_EQ(s.get_scale(), 65536.0);
    EXPECT_EQ(s.get_growth_tracker(), 0);
}

TEST(GradScaler, SpecVectorOneOverflowHalvesAndSkips)
{
    GradScaler s{GradScalerKwargs{}};
    Fixture f(s);
    for (int i = 0; i < 5; ++i) {
        f.set_grad(2.0f);
        ASSERT_TRUE(f.step());
    }
    EXPECT_EQ(s.get_growth_tracker(), 5);
    f.set_grad(kInf);
    EXPECT_FALSE(f.step()); // optimizer step skipped
    EXPECT_EQ(s.get_scale(), 32768.0);
    EXPECT_EQ(s.get_growth_tracker(), 0);
}

// A scripted sequence: every step's scale, tracker and skip, with interval 3 from scale 8.
TEST(GradScaler, ScriptedSequence)
{
    struct Row {
        float grad;
        bool stepped;
        double scale_after;
        int64_t tracker_after;
    };
    const Row rows[] = {
        {1.0f, true, 8, 1},      {1.0f, true, 8, 2},      {1.0f, true, 16, 0},    // 3rd clean step grows
        {kNaN, false, 8, 0},     {1.0f, true, 8, 1},      {-kInf, false, 4, 0},   // NaN and -inf back off
        {1.0f, true, 4, 1},      {1.0f, true, 4, 2},      {1.0f, true, 8, 0},
        {1.0f, true, 8, 1},      {kInf, false, 4, 0},     {kInf, false, 2, 0},    // consecutive overflows
        {1.0f, true, 2, 1},      {1.0f, true, 2, 2},      {1.0f, true, 4, 0},
    };
    GradScaler s{kwargs(8.0, 3)};
    Fixture f(s);
    int i = 0;
    for (const Row &r : rows) {
        SCOPED_TRACE("step " + std::to_string(++i));
        const double scale_before = s.get_scale();
        f.set_grad(r.grad * static_cast<float>(scale_before));
        EXPECT_EQ(f.step(), r.stepped);
        EXPECT_EQ(s.get_scale(), r.scale_after);
        EXPECT_EQ(s.get_growth_tracker(), r.tracker_after);
        if (r.stepped) {
            EXPECT_TRUE(at::equal(f.param.grad(), at::full({3}, r.grad))); // unscaled exactly
        }
    }
}

TEST(GradScaler, NonFiniteInAnyElementOfAnyParameter)
{
    GradScaler s{kwargs(4.0, 100)};
    at::Tensor a = at::zeros({4}).set_requires_grad(true), b = at::zeros({2, 2}).set_requires_grad(true);
    at::Tensor c = at::zeros({1}).set_requires_grad(true); // no gradient: ignored
    (void)s.scale(at::ones({}));
    a.mutable_grad() = at::ones({4});
    b.mutable_grad() = at::ones({2, 2});
    b.mutable_grad()[1][0] = kNaN;
    int opt = 0;
    s.unscale_(&opt, {a, b, c});
    EXPECT_TRUE(s.found_inf(&opt));
    EXPECT_EQ(s.stage(&opt), GradScaler::Stage::Unscaled);
    // Every gradient is multiplied by inv_scale, non-finite ones included.
    EXPECT_TRUE(at::equal(a.grad(), at::full({4}, 0.25f)));
    EXPECT_EQ(b.grad()[0][0].item<float>(), 0.25f);
    EXPECT_TRUE(std::isnan(b.grad()[1][0].item<float>()));
    bool ran = false;
    EXPECT_FALSE(s.step(&opt, {a, b, c}, [&] { ran = true; }));
    EXPECT_FALSE(ran);
    EXPECT_EQ(s.stage(&opt), GradScaler::Stage::Stepped);
    s.update();
    EXPECT_EQ(s.stage(&opt), GradScaler::Stage::Ready);
    EXPECT_EQ(s.get_scale(), 2.0);
}

TEST(GradScaler, InverseScaleIsFloat64ReciprocalCastToFloat32)
{
    GradScaler s{kwargs(3.0, 100)};
    Fixture f(s);
    f.set_grad(7.0f);
    int opt = 0;
    s.unscale_(&opt, f.params);
    const float inv = static_cast<float>(1.0 / static_cast<double>(3.0f));
    EXPECT_EQ(f.param.grad()[0].item<float>(), 7.0f * inv);
}

TEST(GradScaler, UnscaleOnceThenStepDoesNotUnscaleAgain)
{
    GradScaler s{kwargs(16.0, 100)};
    Fixture f(s);
    f.set_grad(64.0f);
    s.unscale_(&f, f.params); // e.g. clip_grad_norm
    EXPECT_EQ(f.param.grad()[0].item<float>(), 4.0f);
    float seen = 0.0f;
    EXPECT_TRUE(s.step(&f, f.params, [&] { seen = f.param.grad()[0].item<float>(); }));
    EXPECT_EQ(seen, 4.0f);
    s.update();
    EXPECT_EQ(s.get_growth_tracker(), 1);
}

TEST(GradScaler, CallOrderErrors)
{
    GradScaler s{kwargs(16.0, 100)};
    at::Tensor p = at::zeros({2}).set_requires_grad(true);
    p.mutable_grad() = at::ones({2});
    int opt = 0;
    // Nothing was scaled yet.
    EXPECT_EQ(catch_error([&] { s.unscale_(&opt, {p}); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_EQ(catch_error([&] { s.update(); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_EQ(catch_error([&] { s.step(&opt, {p}, [] {}); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    (void)s.scale(at::ones({}));
    // update() with no inf check recorded.
    auto e = catch_error([&] { s.update(); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("no inf checks"), std::string::npos) << e.what();
    s.unscale_(&opt, {p});
    e = catch_error([&] { s.unscale_(&opt, {p}); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("already unscaled"), std::string::npos) << e.what();
    EXPECT_TRUE(s.step(&opt, {p}, [] {}));
    EXPECT_EQ(catch_error([&] { s.step(&opt, {p}, [] {}); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_EQ(catch_error([&] { s.unscale_(&opt, {p}); }).code(), ACCEL_ERR_FAILED_PRECONDITION);
    s.update();
    // An optimizer without any gradient records no inf check: its step is an error, as in PyTorch.
    at::Tensor q = at::zeros({2}).set_requires_grad(true);
    int other = 0;
    e = catch_error([&] { s.step(&other, {q}, [] {}); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("no inf checks were recorded for this optimizer"), std::string::npos);
}

TEST(GradScaler, RejectsFp16Gradients)
{
    GradScaler s{kwargs(16.0, 100)};
    (void)s.scale(at::ones({}));
    at::Tensor p = at::zeros({2}, at::kHalf).set_requires_grad(true);
    p.mutable_grad() = at::ones({2}, at::kHalf);
    int opt = 0;
    auto e = catch_error([&] { s.unscale_(&opt, {p}); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("FP16 gradients"), std::string::npos);
}

TEST(GradScaler, GrowthNeverReachesInfinity)
{
    GradScaler s{kwargs(3.0e38, 1)};
    Fixture f(s);
    f.set_grad(1.0f);
    EXPECT_TRUE(f.step());
    EXPECT_EQ(s.get_scale(), static_cast<double>(3.0e38f));
    EXPECT_EQ(s.get_growth_tracker(), 0);
}

TEST(GradScaler, FactorsAreAppliedInFloat64AndRoundedToFloat32)
{
    GradScaler s{kwargs(1000.0, 1, 1.1, 0.3)};
    Fixture f(s);
    f.set_grad(1.0f);
    EXPECT_TRUE(f.step());
    const float grown = static_cast<float>(static_cast<double>(1000.0f) * 1.1);
    EXPECT_EQ(s.get_scale(), static_cast<double>(grown));
    f.set_grad(kInf);
    EXPECT_FALSE(f.step());
    EXPECT_EQ(s.get_scale(), static_cast<double>(static_cast<float>(static_cast<double>(grown) * 0.3)));
}

TEST(GradScaler, UpdateWithNewScale)
{
    GradScaler s{kwargs(16.0, 100)};
    Fixture f(s);
    f.set_grad(1.0f);
    EXPECT_TRUE(f.step());
    EXPECT_EQ(s.get_growth_tracker(), 1);
    s.update(512.0);
    EXPECT_EQ(s.get_scale(), 512.0);
    EXPECT_EQ(s.get_growth_tracker(), 1); // the tracker is left alone
    EXPECT_EQ(catch_error([&] { s.update(-1.0); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(catch_error([&] { s.update(1e39); }).code(), ACCEL_ERR_INVALID_ARGUMENT);
}

TEST(GradScaler, TwoOptimizersShareOneUpdate)
{
    GradScaler s{kwargs(64.0, 100)};
    at::Tensor a = at::zeros({2}).set_requires_grad(true), b = at::zeros({2}).set_requires_grad(true);
    (void)s.scale(at::ones({}));
    a.mutable_grad() = at::ones({2});
    b.mutable_grad() = at::full({2}, kInf);
    int oa = 0, ob = 0;
    EXPECT_TRUE(s.step(&oa, {a}, [] {}));
    EXPECT_FALSE(s.step(&ob, {b}, [] {}));
    s.update(); // found_inf summed over both optimizers
    EXPECT_EQ(s.get_scale(), 32.0);
    EXPECT_EQ(s.stage(&oa), GradScaler::Stage::Ready);
    EXPECT_EQ(s.stage(&ob), GradScaler::Stage::Ready);
}

TEST(GradScaler, FoundInfReducerSeesAndCombinesTheFlag)
{
    GradScaler s{kwargs(64.0, 100)};
    Fixture f(s);
    int calls = 0;
    // Another rank overflowed: the all-reduce makes the flag 1 here too.
    s.set_found_inf_reducer([&](at::Tensor &found) {
        ++calls;
        EXPECT_EQ(found.item<float>(), 0.0f);
        found.fill_(1.0);
    });
    f.set_grad(64.0f);
    EXPECT_FALSE(f.step());
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(s.get_scale(), 32.0);
}

TEST(GradScaler, Disabled)
{
    GradScalerKwargs k;
    k.enabled = false;
    GradScaler s{k};
    at::Tensor loss = at::full({}, 3.0);
    EXPECT_TRUE(s.scale(loss).is_same(loss));
    EXPECT_EQ(s.get_scale(), 1.0);
    EXPECT_FALSE(s.state().has_value());
    bool ran = false;
    EXPECT_TRUE(s.step(nullptr, {}, [&] { ran = true; }));
    EXPECT_TRUE(ran);
    EXPECT_NO_THROW(s.update());
    EXPECT_NO_THROW(s.load_state(std::nullopt)); // ignored, as in PyTorch
}

TEST(GradScaler, StateDictRoundTrip)
{
    GradScaler s{kwargs(256.0, 4, 3.0, 0.25)};
    Fixture f(s);
    for (float g : {1.0f, 1.0f, kInf, 1.0f, 1.0f}) {
        f.set_grad(g);
        f.step();
    }
    auto st = s.state();
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->scale, 64.0);
    EXPECT_EQ(st->growth_tracker, 2);
    EXPECT_EQ(st->growth_factor, 3.0);
    EXPECT_EQ(st->backoff_factor, 0.25);
    EXPECT_EQ(st->growth_interval, 4);

    GradScaler fresh{GradScalerKwargs{}};
    fresh.load_state(st);
    EXPECT_EQ(fresh.get_scale(), 64.0); // loaded before the scale tensor exists: becomes init_scale
    EXPECT_EQ(fresh.get_growth_tracker(), 2);
    Fixture g(fresh);
    EXPECT_EQ(fresh.get_scale(), 64.0);
    for (int i = 0; i < 2; ++i) {
        g.set_grad(1.0f);
        g.step();
    }
    EXPECT_EQ(fresh.get_scale(), 192.0); // growth_factor 3 after interval 4 (2 loaded + 2 clean)
    auto e = catch_error([&] { fresh.load_state(std::nullopt); });
    EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos);
}

TEST(GradScaler, ConstructorValidates)
{
    EXPECT_EQ(catch_error([] { GradScaler{kwargs(0.0)}; }).code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(catch_error([] { GradScaler{kwargs(1.0, 10, 1.0)}; }).code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(catch_error([] { GradScaler{kwargs(1.0, 10, 2.0, 1.0)}; }).code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(catch_error([] { GradScaler{kwargs(1.0, 0)}; }).code(), ACCEL_ERR_INVALID_ARGUMENT);
}

// DeepSpeed's rule (sharding-and-parallelism.md §2.1), step by step: window 3, hysteresis 2, min 1024.
TEST(GradScaler, DeepSpeedHysteresisWindowAndFloor)
{
    GradScalerKwargs k = kwargs();
    accel::config::DeepSpeedLossScale d;
    d.initial_scale = 1024.0;
    d.loss_scale_window = 3;
    d.hysteresis = 2;
    d.min_loss_scale = 512.0;
    k.deepspeed = d;
    GradScaler s(k);
    EXPECT_EQ(s.get_scale(), 1024.0);
    Fixture f(s);
    const float inf = std::numeric_limits<float>::infinity();
    // (gradient, stepped, scale after update)
    const struct {
        float grad;
        bool stepped;
        double scale;
    } table[] = {
        {1.0f, true, 1024.0},  // iter 0: (0 - -1) % 3 = 1
        {1.0f, true, 1024.0},  // iter 1: 2
        {1.0f, true, 2048.0},  // iter 2: 3 % 3 = 0: doubled, hysteresis refilled
        {inf, false, 2048.0},  // iter 3: overflow, hysteresis 2 -> 1, scale kept
        {inf, false, 1024.0},  // iter 4: overflow with hysteresis 1: halved
        {1.0f, true, 1024.0},  // iter 5: (5 - 4) % 3 = 1
        {1.0f, true, 1024.0},  // iter 6
        {1.0f, true, 2048.0},  // iter 7: doubled, hysteresis refilled to 2
        {inf, false, 2048.0},  // iter 8: 2 -> 1
        {1.0f, true, 2048.0},  // iter 9: clean, not consecutive: hysteresis stays 1
        {inf, false, 1024.0},  // iter 10: halved at once
        {inf, false, 512.0},   // iter 11: halved to the floor
    };
    for (const auto &row : table) {
        f.set_grad(row.grad);
        EXPECT_EQ(f.step(), row.stepped);
        EXPECT_EQ(s.get_scale(), row.scale);
    }
    // At the floor another overflow stops the run, as DeepSpeed does.
    f.set_grad(inf);
    bool ran = false;
    s.step(&f, f.params, [&] { ran = true; });
    EXPECT_FALSE(ran);
    accel::Error e = catch_error([&] { s.update(); });
    EXPECT_EQ(e.code(), ACCEL_ERR_OUT_OF_RANGE);
    EXPECT_NE(std::string(e.what()).find("min_loss_scale"), std::string::npos);
}

TEST(GradScaler, DeepSpeedConsecutiveHysteresisAndStaticScale)
{
    GradScalerKwargs k = kwargs();
    accel::config::DeepSpeedLossScale d;
    d.initial_scale = 64.0;
    d.loss_scale_window = 100;
    d.hysteresis = 2;
    d.consecutive_hysteresis = true;
    k.deepspeed = d;
    GradScaler s(k);
    Fixture f(s);
    const float inf = std::numeric_limits<float>::infinity();
    f.set_grad(inf);
    EXPECT_FALSE(f.step());
    EXPECT_EQ(s.get_scale(), 64.0); // hysteresis 2 -> 1
    f.set_grad(1.0f);
    EXPECT_TRUE(f.step());          // consecutive: a clean step refills it
    f.set_grad(inf);
    EXPECT_FALSE(f.step());
    EXPECT_EQ(s.get_scale(), 64.0); // so this overflow is absorbed again
    // The counters travel in scaler.pt.
    accel::PyRef sd = s.state_dict();
    EXPECT_EQ(sd->get("cur_iter")->i, 3);
    EXPECT_EQ(sd->get("last_overflow_iter")->i, 2);
    EXPECT_EQ(sd->get("cur_hysteresis")->i, 1);

    // loss_scale > 0: static; overflows are not looked for (DeepSpeed's static scaler always steps).
    accel::config::DeepSpeedLossScale fixed;
    fixed.loss_scale = 128.0;
    GradScalerKwargs ks = kwargs();
    ks.deepspeed = fixed;
    GradScaler st(ks);
    Fixture g(st);
    g.set_grad(inf);
    EXPECT_TRUE(g.step());
    EXPECT_EQ(st.get_scale(), 128.0);
}
