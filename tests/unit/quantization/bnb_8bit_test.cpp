// quantization/bnb_8bit: int8 row quantization (SCB) and LLM.int8's matmul with and without outlier columns,
// against a reference computed in double from the same quantized values (precision-and-quantization.md §3).
#include "common/error.hpp"
#include "quantization/bnb_8bit.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace bnb = accel::bnb;

namespace {

// out[t, o] = sum_k CA[t,k] CB[o,k] * SCA[t] SCB[o] * 6.200124e-05 + bias[o] + sum_{k outlier} x[t,k] CB[o,k] SCB[o] / 127
at::Tensor reference(const at::Tensor &x, const bnb::Int8Rows &a, const at::Tensor &cb, const at::Tensor &scb,
                     const at::Tensor &bias, int64_t *int_sum_check, const at::Tensor &c_int32)
{
    const int64_t T = x.size(0), K = x.size(1), O = cb.size(0);
    at::Tensor out = at::zeros({T, O}, at::kDouble);
    auto ca = a.q.accessor<int8_t, 2>();
    auto w = cb.accessor<int8_t, 2>();
    auto c = c_int32.accessor<int32_t, 2>();
    auto xs = x.accessor<float, 2>();
    std::vector<bool> outlier(static_cast<size_t>(K), false);
    for (int64_t i = 0; i < a.outlier_cols.numel(); ++i) outlier[static_cast<size_t>(a.outlier_cols[i].item<int64_t>())] = true;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t o = 0; o < O; ++o) {
            int64_t sum = 0;
            for (int64_t k = 0; k < K; ++k) sum += int64_t{ca[t][k]} * w[o][k];
            if (sum != c[t][o]) ++*int_sum_check;
            double v = static_cast<double>(sum) * a.stats[t].item<double>() * scb[o].item<double>() * 6.200124e-05 +
                       (bias.defined() ? bias[o].item<double>() : 0.0);
            for (int64_t k = 0; k < K; ++k)
                if (outlier[static_cast<size_t>(k)]) v += double{xs[t][k]} * w[o][k] * scb[o].item<double>() / 127.0;
            out[t][o] = v;
        }
    return out;
}

} // namespace

TEST(Bnb8bit, RowQuantizationOfKnownRows)
{
    const at::Tensor w = at::tensor({1.0f, -2.0f, 0.5f, 4.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.3f, 0.1f, 0.2f, 0.05f}).view({3, 4});
    const auto q = bnb::int8_vectorwise_quant(w);
    EXPECT_TRUE(at::equal(q.stats, at::tensor({4.0f, 0.0f, 0.3f})));
    // round(x * 127 / SCB), halves to even as torch.round: 31.75 -> 32, -63.5 -> -64, 15.875 -> 16;
    // a zero row stores 0; -0.3 -> -127, 0.1 -> 42.33 -> 42, 0.2 -> 84.67 -> 85, 0.05 -> 21.17 -> 21.
    const std::vector<int8_t> want = {32, -64, 16, 127, 0, 0, 0, 0, -127, 42, 85, 21};
    ASSERT_EQ(q.q.scalar_type(), at::kChar);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(q.q.view(-1)[static_cast<int64_t>(i)].item<int8_t>(), want[i]) << i;
    EXPECT_EQ(q.outlier_cols.numel(), 0);
    // Dequantized: q * SCB / 127.
    EXPECT_NEAR(bnb::int8_vectorwise_dequant(q.q, q.stats)[0][1].item<float>(), -64 * 4.0 / 127, 1e-6);
}

TEST(Bnb8bit, OutliersAreLeftOutOfTheStatsAndTheirColumnsZeroed)
{
    const at::Tensor x = at::tensor({1.0f, 8.0f, -0.5f, 2.0f, 0.5f, -1.0f, -7.0f, 0.25f}).view({2, 4});
    const auto q = bnb::int8_vectorwise_quant(x, 6.0);
    EXPECT_TRUE(at::equal(q.outlier_cols, at::tensor({1, 2}, at::kLong)));
    EXPECT_TRUE(at::equal(q.stats, at::tensor({2.0f, 1.0f}))); // 8 and -7 left out
    EXPECT_TRUE(at::equal(q.q, at::tensor({64, 0, 0, 127, 64, 0, 0, 32}, at::kChar).view({2, 4})));
}

TEST(Bnb8bit, LlmInt8MatmulEqualsTheReferenceFromTheSameQuantizedValues)
{
    at::manual_seed(11);
    const at::Tensor weight = at::randn({24, 40}, at::kFloat) * 0.2;
    const at::Tensor bias = at::randn({24}, at::kFloat);
    const auto w = bnb::int8_vectorwise_quant(weight);
    for (double threshold : {0.0, 6.0}) {
        at::Tensor x = at::randn({9, 40}, at::kFloat);
        x.index_put_({3, 5}, 9.0f);   // outliers in columns 5 and 17 (above 6, not above 0 = off)
        x.index_put_({7, 17}, -12.0f);
        const auto a = bnb::int8_vectorwise_quant(x, threshold);
        EXPECT_EQ(a.outlier_cols.numel(), threshold > 0 ? 2 : 0);
        const at::Tensor c = bnb::int8_linear_matmul(a.q, w.q);
        ASSERT_EQ(c.scalar_type(), at::kInt);
        int64_t mismatched = 0;
        const at::Tensor want = reference(x, a, w.q, w.stats, bias, &mismatched, c);
        EXPECT_EQ(mismatched, 0) << "the int32 product must be exact";
        const at::Tensor got = bnb::int8_linear(x, w.q, w.stats, bias, threshold);
        ASSERT_EQ(got.sizes(), at::IntArrayRef({9, 24}));
        // The float32 dequantization and outlier addmm round each output a few times: relative 1e-6 of the
        // output's magnitude (|out| < 30 here) covers them.
        EXPECT_LE((got.to(at::kDouble) - want).abs().max().item<double>(), 3e-5) << "threshold " << threshold;
        // And LLM.int8 is close to the float product (the point of the outlier decomposition: without it the
        // rows holding 9 and -12 lose resolution).
        const double err = (got - at::linear(x, bnb::int8_vectorwise_dequant(w.q, w.stats), bias)).abs().max().item<double>();
        EXPECT_LT(err, threshold > 0 ? 0.06 : 0.2) << threshold;
    }
}

TEST(Bnb8bit, LeadingDimensionsAndDtypeAreKept)
{
    at::manual_seed(2);
    const auto w = bnb::int8_vectorwise_quant(at::randn({8, 16}, at::kFloat));
    const at::Tensor x = at::randn({2, 3, 16}, at::kFloat);
    const at::Tensor y = bnb::int8_linear(x.to(at::kBFloat16), w.q, w.stats, at::Tensor(), 6.0);
    EXPECT_EQ(y.sizes(), at::IntArrayRef({2, 3, 8}));
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_THROW(bnb::int8_linear(at::randn({3, 15}), w.q, w.stats, at::Tensor(), 6.0), accel::Error);
}
