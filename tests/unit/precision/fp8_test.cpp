// precision/fp8: the E4M3 and E5M2 grids (round to nearest even, saturation), TransformerEngine's delayed
// scaling (amax history roll, scale update; precision-and-quantization.md §1-2), and the emulated FP8
// linear layer against a hand computation.
#include "common/error.hpp"
#include "precision/fp8.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

namespace fp8 = accel::fp8;
using fp8::Format;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Every finite non-negative value of the format, ascending, with its mantissa field.
struct GridValue {
    float value;
    int mantissa;
};
std::vector<GridValue> grid(Format f)
{
    const int m_bits = f == Format::E4M3 ? 3 : 2, bias = f == Format::E4M3 ? 7 : 15;
    const int max_e = f == Format::E4M3 ? 15 : 30; // E5M2's exponent 31 is inf/NaN
    std::vector<GridValue> out;
    const int m_count = 1 << m_bits;
    for (int m = 0; m < m_count; ++m) out.push_back({std::ldexp(static_cast<float>(m) / m_count, 1 - bias), m});
    for (int e = 1; e <= max_e; ++e)
        for (int m = 0; m < m_count; ++m) {
            if (f == Format::E4M3 && e == 15 && m == 7) continue; // S.1111.111 is NaN
            out.push_back({std::ldexp(1.0f + static_cast<float>(m) / m_count, e - bias), m});
        }
    return out;
}

float round1(float x, Format f) { return fp8::round_to_grid(at::full({1}, x), f).item<float>(); }

accel::config::FP8RecipeKwargs recipe(int64_t len = 4, const char *algo = "most_recent", int64_t margin = 0,
                                      int64_t interval = 1)
{
    accel::config::FP8RecipeKwargs r;
    r.amax_history_len = len;
    r.amax_compute_algo = algo;
    r.margin = margin;
    r.interval = interval;
    return r;
}

} // namespace

TEST(Fp8Grid, MaxFinite)
{
    EXPECT_EQ(fp8::max_finite(Format::E4M3), 448.0f);
    EXPECT_EQ(fp8::max_finite(Format::E5M2), 57344.0f);
    EXPECT_EQ(grid(Format::E4M3).back().value, 448.0f);
    EXPECT_EQ(grid(Format::E5M2).back().value, 57344.0f);
    EXPECT_EQ(grid(Format::E4M3)[1].value, std::ldexp(1.0f, -9)); // smallest subnormal
    EXPECT_EQ(grid(Format::E5M2)[1].value, std::ldexp(1.0f, -16));
}

TEST(Fp8Grid, GridValuesAreFixedPoints)
{
    for (Format f : {Format::E4M3, Format::E5M2}) {
        std::vector<float> v;
        for (const auto &g : grid(f)) {
            v.push_back(g.value);
            v.push_back(-g.value);
        }
        at::Tensor x = at::tensor(v);
        EXPECT_TRUE(at::equal(fp8::round_to_grid(x, f), x)) << (f == Format::E4M3 ? "E4M3" : "E5M2");
    }
    EXPECT_EQ(grid(Format::E4M3).size(), 127u); // 0 plus 126 positive finite values
    EXPECT_EQ(grid(Format::E5M2).size(), 124u);
}

TEST(Fp8Grid, RoundsToNearestTiesToEven)
{
    for (Format f : {Format::E4M3, Format::E5M2}) {
        const auto g = grid(f);
        std::vector<float> mids, below, above, want_mid, want_below, want_above;
        for (size_t i = 0; i + 1 < g.size(); ++i) {
            const float lo = g[i].value, hi = g[i + 1].value, mid = (lo + hi) / 2; // exact in float32
            mids.push_back(mid);
            // Ties go to the even mantissa (the largest subnormal -> smallest normal boundary included).
            want_mid.push_back(g[i].mantissa % 2 == 0 ? lo : hi);
            below.push_back(std::nextafter(mid, lo));
            want_below.push_back(lo);
            above.push_back(std::nextafter(mid, hi));
            want_above.push_back(hi);
        }
        const char *name = f == Format::E4M3 ? "E4M3" : "E5M2";
        EXPECT_TRUE(at::equal(fp8::round_to_grid(at::tensor(mids), f), at::tensor(want_mid))) << name;
        EXPECT_TRUE(at::equal(fp8::round_to_grid(at::tensor(below), f), at::tensor(want_below))) << name;
        EXPECT_TRUE(at::equal(fp8::round_to_grid(at::tensor(above), f), at::tensor(want_above))) << name;
        EXPECT_TRUE(at::equal(fp8::round_to_grid(-at::tensor(mids), f), -at::tensor(want_mid))) << name;
    }
    EXPECT_EQ(round1(3.1f, Format::E4M3), 3.0f);
    EXPECT_EQ(round1(3.125f, Format::E4M3), 3.0f);  // tie between 3.0 (m=4) and 3.25 (m=5)
    EXPECT_EQ(round1(3.375f, Format::E4M3), 3.5f);  // tie between 3.25 (m=5) and 3.5 (m=6)
    EXPECT_EQ(round1(3.1f, Format::E5M2), 3.0f);
    EXPECT_EQ(round1(3.25f, Format::E5M2), 3.0f);   // tie between 3.0 (m=2) and 3.5 (m=3)
    EXPECT_EQ(round1(3.75f, Format::E5M2), 4.0f);   // tie between 3.5 (m=3) and 4.0 (m=0)
}

TEST(Fp8Grid, Saturation)
{
    EXPECT_EQ(round1(448.0f, Format::E4M3), 448.0f);
    EXPECT_EQ(round1(460.0f, Format::E4M3), 448.0f);
    EXPECT_EQ(round1(464.0f, Format::E4M3), 448.0f); // would round to 480, which E4M3 does not have
    EXPECT_EQ(round1(1.0e6f, Format::E4M3), 448.0f);
    EXPECT_EQ(round1(-1.0e6f, Format::E4M3), -448.0f);
    EXPECT_EQ(round1(kInf, Format::E4M3), 448.0f);
    EXPECT_EQ(round1(-kInf, Format::E4M3), -448.0f);
    EXPECT_EQ(round1(57344.0f, Format::E5M2), 57344.0f);
    EXPECT_EQ(round1(60000.0f, Format::E5M2), 57344.0f);
    EXPECT_EQ(round1(61440.0f, Format::E5M2), 57344.0f);
    EXPECT_EQ(round1(1.0e9f, Format::E5M2), 57344.0f);
    EXPECT_EQ(round1(-kInf, Format::E5M2), -57344.0f);
    EXPECT_TRUE(std::isnan(round1(std::nanf(""), Format::E4M3)));
    EXPECT_TRUE(std::isnan(round1(std::nanf(""), Format::E5M2)));
}

TEST(Fp8Grid, Underflow)
{
    const float min_sub = std::ldexp(1.0f, -9);
    EXPECT_EQ(round1(min_sub / 2, Format::E4M3), 0.0f);          // tie with 0: even
    EXPECT_EQ(round1(min_sub * 0.75f, Format::E4M3), min_sub);
    EXPECT_EQ(round1(min_sub * 0.25f, Format::E4M3), 0.0f);
    EXPECT_EQ(round1(1e-30f, Format::E5M2), 0.0f);
    EXPECT_EQ(round1(1e-40f, Format::E4M3), 0.0f);               // a float32 subnormal
    EXPECT_EQ(round1(0.0f, Format::E4M3), 0.0f);
}

TEST(Fp8Grid, QuantizeDequantizeUsesTheScale)
{
    at::Tensor x = at::tensor({3.0f, 3.1f, -0.01f, 1000.0f});
    at::Tensor q = fp8::quantize_dequantize(x, 128.0f, Format::E4M3);
    // x * 128 = 384, 396.8 -> 384 (spacing 32), -1.28 -> -1.25, 128000 -> 448; then / 128.
    EXPECT_TRUE(at::equal(q, at::tensor({3.0f, 3.0f, -1.25f / 128, 448.0f / 128})));
    EXPECT_EQ(q.scalar_type(), at::kFloat);
}

TEST(Fp8Grid, Amax)
{
    EXPECT_EQ(fp8::amax(at::tensor({1.0f, -5.0f, 2.0f})), 5.0f);
    EXPECT_EQ(fp8::amax(at::zeros({0})), 0.0f);
    EXPECT_TRUE(std::isnan(fp8::amax(at::tensor({1.0f, std::nanf("")}))));
}

TEST(Fp8DelayedScaling, ScaleFromAmax)
{
    fp8::DelayedScaling s(Format::E4M3, recipe(1));
    EXPECT_EQ(s.scale(), 1.0f);
    s.record_and_update(3.5f);
    EXPECT_EQ(s.scale(), 128.0f);
    EXPECT_EQ(s.scale_inv(), 1.0f / 128);
    fp8::DelayedScaling m(Format::E4M3, recipe(1, "most_recent", 1));
    m.record_and_update(3.5f);
    EXPECT_EQ(m.scale(), 64.0f); // margin 1
    // amax 0, inf or NaN keep the previous scale.
    for (float bad : {0.0f, kInf, std::nanf("")}) {
        s.record_and_update(bad);
        EXPECT_EQ(s.scale(), 128.0f) << bad;
    }
    fp8::DelayedScaling e5(Format::E5M2, recipe(1));
    e5.record_and_update(7.0f);
    EXPECT_EQ(e5.scale(), 57344.0f / 7.0f);
    fp8::DelayedScaling tiny(Format::E4M3, recipe(1));
    tiny.record_and_update(1e-45f); // 448 / 1e-45 overflows: the largest float instead
    EXPECT_EQ(tiny.scale(), FLT_MAX);
}

TEST(Fp8DelayedScaling, HistoryRoll)
{
    fp8::DelayedScaling s(Format::E4M3, recipe(4, "max"));
    using V = std::vector<float>;
    EXPECT_EQ(s.amax_history(), V({0, 0, 0, 0}));
    s.record(1.0f);
    EXPECT_EQ(s.amax_history(), V({1, 0, 0, 0})); // this step's amax goes into slot 0
    s.update();
    EXPECT_EQ(s.amax_history(), V({0, 0, 0, 1})); // new[i] = old[i+1], new[L-1] = old[0], new[0] = 0
    s.record_and_update(2.0f);
    EXPECT_EQ(s.amax_history(), V({0, 0, 1, 2}));
    s.record_and_update(3.0f);
    EXPECT_EQ(s.amax_history(), V({0, 1, 2, 3}));
    s.record_and_update(4.0f);
    EXPECT_EQ(s.amax_history(), V({0, 2, 3, 4})); // the oldest (1) left the window
    EXPECT_EQ(s.scale(), 448.0f / 4.0f);
    // Several casts in one step keep the largest amax.
    s.record(0.5f);
    s.record(6.0f);
    s.record(2.0f);
    EXPECT_EQ(s.amax_history()[0], 6.0f);
}

TEST(Fp8DelayedScaling, MaxVersusMostRecent)
{
    fp8::DelayedScaling mx(Format::E4M3, recipe(3, "max")), mr(Format::E4M3, recipe(3, "most_recent"));
    const float amaxes[] = {8.0f, 1.0f, 1.0f, 1.0f};
    const float want_max[] = {56.0f, 56.0f, 56.0f, 448.0f}; // 8 stays in the window for 3 updates
    const float want_recent[] = {56.0f, 448.0f, 448.0f, 448.0f};
    for (int i = 0; i < 4; ++i) {
        mx.record_and_update(amaxes[i]);
        mr.record_and_update(amaxes[i]);
        EXPECT_EQ(mx.scale(), want_max[i]) << i;
        EXPECT_EQ(mr.scale(), want_recent[i]) << i;
    }
}

TEST(Fp8DelayedScaling, Interval)
{
    fp8::DelayedScaling s(Format::E4M3, recipe(4, "max", 0, 2));
    s.record_and_update(2.0f);
    EXPECT_EQ(s.scale(), 1.0f); // first update: not recomputed
    s.record_and_update(4.0f);
    EXPECT_EQ(s.scale(), 112.0f); // second: max(2, 4)
    s.record_and_update(8.0f);
    EXPECT_EQ(s.scale(), 112.0f);
    s.record_and_update(1.0f);
    EXPECT_EQ(s.scale(), 56.0f);
}

TEST(Fp8Linear, FormatsOfTheRecipe)
{
    auto r = recipe();
    r.fp8_format = "HYBRID";
    fp8::LinearState hybrid(r);
    EXPECT_EQ(hybrid.input.format(), Format::E4M3);
    EXPECT_EQ(hybrid.weight.format(), Format::E4M3);
    EXPECT_EQ(hybrid.grad_output.format(), Format::E5M2);
    r.fp8_format = "E4M3";
    fp8::LinearState e4(r);
    EXPECT_EQ(e4.grad_output.format(), Format::E4M3);
}

TEST(Fp8Linear, ForwardAndBackwardMatchHandComputation)
{
    at::manual_seed(3);
    auto r = recipe(2, "most_recent");
    r.fp8_format = "HYBRID";
    auto state = c10::make_intrusive<fp8::LinearState>(r);
    at::Tensor w = (at::randn({5, 7}) * 0.3).set_requires_grad(true);
    at::Tensor b = at::randn({5}).set_requires_grad(true);
    at::Tensor x0 = at::randn({2, 3, 7}) * 4; // N-d input: flattened to (6, 7) for the GEMMs
    at::Tensor g0 = at::randn({2, 3, 5}) * 1e-3;

    for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        at::Tensor x = x0.clone().set_requires_grad(true);
        const float sx = state->input.scale(), sw = state->weight.scale(), sg = state->grad_output.scale();
        if (step == 0) {
            EXPECT_EQ(sx, 1.0f);
        }
        at::Tensor y = fp8::linear(x, w, b, state);
        ASSERT_EQ(y.sizes(), at::IntArrayRef({2, 3, 5}));
        at::Tensor xq = fp8::quantize_dequantize(x0.reshape({6, 7}), sx, Format::E4M3);
        at::Tensor wq = fp8::quantize_dequantize(w.detach(), sw, Format::E4M3);
        at::Tensor want = (at::matmul(xq, wq.t()) + b.detach()).reshape({2, 3, 5});
        EXPECT_TRUE(at::allclose(y, want, 1e-6, 1e-6));
        // Delayed scaling: this step's amax sets the next step's scale.
        EXPECT_EQ(state->input.scale(), 448.0f / fp8::amax(x0));
        EXPECT_EQ(state->weight.scale(), 448.0f / fp8::amax(w));

        w.mutable_grad().reset();
        b.mutable_grad().reset();
        y.backward(g0);
        at::Tensor gq = fp8::quantize_dequantize(g0.reshape({6, 5}), sg, Format::E5M2);
        EXPECT_TRUE(at::allclose(x.grad(), at::matmul(gq, wq).reshape({2, 3, 7}), 1e-6, 1e-7));
        EXPECT_TRUE(at::allclose(w.grad(), at::matmul(gq.t(), xq), 1e-6, 1e-7));
        EXPECT_TRUE(at::allclose(b.grad(), g0.reshape({6, 5}).sum(0), 1e-6, 1e-7)); // from the unquantized gradient
        EXPECT_EQ(state->grad_output.scale(), 57344.0f / fp8::amax(g0));
    }
    // And the emulated layer stays close to the exact one.
    at::Tensor exact = at::linear(x0, w.detach(), b.detach());
    EXPECT_TRUE(at::allclose(fp8::linear(x0, w, b, state), exact, 0.1, 0.1));
}

TEST(Fp8Linear, OverrideLinearPrecision)
{
    at::manual_seed(4);
    auto r = recipe(1);
    r.override_linear_precision[0] = r.override_linear_precision[1] = r.override_linear_precision[2] = true;
    auto state = c10::make_intrusive<fp8::LinearState>(r);
    at::Tensor w = at::randn({4, 3}).set_requires_grad(true);
    at::Tensor x = at::randn({8, 3}).set_requires_grad(true);
    at::Tensor y = fp8::linear(x, w, at::Tensor(), state); // no bias
    EXPECT_TRUE(at::allclose(y, at::matmul(x, w.t()), 1e-6, 1e-6));
    at::Tensor g = at::randn({8, 4});
    y.backward(g);
    EXPECT_TRUE(at::allclose(x.grad(), at::matmul(g, w.detach()), 1e-6, 1e-6));
    EXPECT_TRUE(at::allclose(w.grad(), at::matmul(g.t(), x.detach()), 1e-6, 1e-6));
    EXPECT_EQ(state->input.scale(), 448.0f / fp8::amax(x)); // amaxes are still recorded
}

TEST(Fp8Linear, InputWithoutGradAndBf16Input)
{
    auto state = c10::make_intrusive<fp8::LinearState>(recipe(1));
    at::Tensor w = at::randn({4, 3}).set_requires_grad(true);
    at::Tensor x = at::randn({8, 3}).to(at::kBFloat16); // e.g. from a conv under bf16 autocast
    at::Tensor y = fp8::linear(x, w, at::Tensor(), state);
    EXPECT_EQ(y.scalar_type(), at::kFloat);
    y.sum().backward();
    EXPECT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
}

TEST(Fp8Scope, ThreadLocalNesting)
{
    EXPECT_FALSE(fp8::enabled());
    {
        fp8::Fp8Scope on(true);
        EXPECT_TRUE(fp8::enabled());
        {
            fp8::Fp8Scope off(false);
            EXPECT_FALSE(fp8::enabled());
        }
        EXPECT_TRUE(fp8::enabled());
    }
    EXPECT_FALSE(fp8::enabled());
}
