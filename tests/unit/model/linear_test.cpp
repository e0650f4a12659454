// model/linear (the linear seam) and precision/fp8_linear (fp8 as a decorator of it): the plain layer
// computes what torch.nn.Linear and HF's Conv1D compute, bit for bit; the fp8 decorator computes as the
// layer it wraps outside an fp8 scope and through the FP8 emulation inside, on the same parameters.
#include "model/linear.hpp"

#include "common/error.hpp"
#include "precision/fp8.hpp"
#include "precision/fp8_linear.hpp"

#include <gtest/gtest.h>

namespace {

using accel::Linear;

TEST(LinearSeam, PlainLayoutsMatchTorch)
{
    at::manual_seed(3);
    at::Tensor x = at::randn({2, 5, 4}), w = at::randn({3, 4}), b = at::randn({3});
    auto out_in = accel::make_linear(w, b, Linear::Layout::OutIn);
    EXPECT_TRUE(out_in->forward(x).equal(at::linear(x, w, b)));
    EXPECT_EQ(out_in->in_features(), 4);
    EXPECT_EQ(out_in->out_features(), 3);
    EXPECT_TRUE(out_in->weight().is_same(w)); // the model's own tensor, not a copy
    at::Tensor wt = w.t().contiguous();     // HF Conv1D keeps [in, out]
    auto in_out = accel::make_linear(wt, b, Linear::Layout::InOut);
    EXPECT_TRUE(in_out->forward(x).equal(at::addmm(b, x.reshape({-1, 4}), wt).view({2, 5, 3})));
    EXPECT_EQ(in_out->in_features(), 4);
    EXPECT_EQ(in_out->out_features(), 3);
    EXPECT_TRUE(in_out->weight_out_in().equal(w));
    auto no_bias = accel::make_linear(wt, at::Tensor(), Linear::Layout::InOut);
    EXPECT_TRUE(no_bias->forward(x).equal(at::mm(x.reshape({-1, 4}), wt).view({2, 5, 3})));
    EXPECT_FALSE(out_in->stateful_forward());
    EXPECT_THROW(accel::make_linear(w, at::randn({4}), Linear::Layout::OutIn), accel::Error);
}

TEST(LinearSeam, Fp8DecoratorOnlyInsideItsScope)
{
    at::manual_seed(4);
    at::Tensor x = at::randn({6, 4}), w = at::randn({4, 3}), b = at::randn({3});
    accel::config::FP8RecipeKwargs recipe;
    auto plain = accel::make_linear(w, b, Linear::Layout::InOut);
    auto fp8 = accel::fp8::make_fp8_linear(plain, recipe);
    EXPECT_TRUE(fp8->stateful_forward());
    EXPECT_TRUE(fp8->weight().is_same(w));
    EXPECT_TRUE(fp8->forward(x).equal(plain->forward(x))); // outside a scope: the wrapped layer
    at::Tensor want, got;
    {
        accel::fp8::Fp8Scope on(true);
        auto state = c10::make_intrusive<accel::fp8::LinearState>(recipe);
        want = accel::fp8::linear(x, w.t(), b, state);
        got = fp8->forward(x);
    }
    EXPECT_TRUE(got.equal(want));
    EXPECT_FALSE(got.equal(plain->forward(x))); // the emulation rounds: the test can tell the paths apart
}

} // namespace
