// quantization/bnb_4bit and bnb_blockwise: the NF4/FP4 tables, nibble packing, block absmax (partial last block),
// the dynamic 8-bit map and double quantization, element by element against precision-and-quantization.md §4.
#include "common/error.hpp"
#include "quantization/bnb_4bit.hpp"
#include "quantization/bnb_blockwise.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace bnb = accel::bnb;
using bnb::QuantType;

namespace {

// The spec's argmin |v - code| by brute force (the code under test uses midpoints): the reference.
int argmin_code(const std::vector<float> &table, float v)
{
    int best = 0;
    for (int i = 1; i < static_cast<int>(table.size()); ++i)
        if (std::fabs(v - table[i]) < std::fabs(v - table[best])) best = i;
    return best;
}

std::vector<float> to_vector(const at::Tensor &t)
{
    const at::Tensor c = t.to(at::kFloat).contiguous();
    return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

std::vector<int> nibbles(const at::Tensor &packed, int64_t n)
{
    std::vector<int> out;
    const uint8_t *p = packed.data_ptr<uint8_t>();
    for (int64_t i = 0; i < n; ++i) out.push_back(i % 2 == 0 ? p[i / 2] >> 4 : p[i / 2] & 0xF);
    return out;
}

} // namespace

TEST(Bnb4bit, TablesAreTheSpecs)
{
    const std::vector<float> nf4 = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
                                    0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
                                    0.7229568362236023f, 1.0f};
    const std::vector<double> fp4 = {0, 0.0052083, 0.6666667, 1.0, 0.3333333, 0.5, 0.1666667, 0.25,
                                     -0.0, -0.0052083, -0.6666667, -1.0, -0.3333333, -0.5, -0.1666667, -0.25};
    for (int i = 0; i < 16; ++i) {
        EXPECT_EQ(bnb::code_table(QuantType::Nf4)[i], nf4[i]) << i;
        EXPECT_NEAR(bnb::code_table(QuantType::Fp4)[i], fp4[i], 1e-7) << i;
        EXPECT_EQ(std::signbit(bnb::code_table(QuantType::Fp4)[i]), i >= 8) << i; // MSB = sign, -0 included
    }
}

TEST(Bnb4bit, KnownVectorsPackHighNibbleFirst)
{
    // Values that are exact code values times the absmax 2 (x / 2 is exact): each must come back as its index.
    const auto &nf4 = bnb::code_table(QuantType::Nf4);
    const at::Tensor x = at::tensor({2.0f, 2 * nf4[1], 0.0f, 2 * nf4[8], 2 * nf4[13]}, at::kFloat);
    const auto q = bnb::quantize_4bit(x, QuantType::Nf4);
    ASSERT_EQ(q.packed.sizes(), at::IntArrayRef({3, 1}));
    const uint8_t *p = q.packed.data_ptr<uint8_t>();
    EXPECT_EQ(p[0], 0xF1); // element 0 (index 15) high, element 1 (index 1) low
    EXPECT_EQ(p[1], 0x78);
    EXPECT_EQ(p[2], 0xD7); // element 4 (index 13), then the pad 0.0 (NF4 index 7)
    EXPECT_EQ(q.state.absmax.item<float>(), 2.0f);
    EXPECT_TRUE(at::equal(bnb::dequantize_4bit(q.packed, q.state), x));

    // FP4 with absmax 3: 3 -> 1.0 (3), -1.5 -> -0.5 (13), 0.5 -> 1/6 (6), -0.75 -> -0.25 (15), small negative
    // -> -0 (8: the sign bit is set as bitsandbytes' dQuantizeFP4 does).
    const at::Tensor y = at::tensor({3.0f, -1.5f, 0.5f, -0.75f, -0.001f, 0.0f}, at::kFloat);
    const auto r = bnb::quantize_4bit(y, QuantType::Fp4);
    EXPECT_EQ(nibbles(r.packed, 6), (std::vector<int>{3, 13, 6, 15, 8, 0}));
}

TEST(Bnb4bit, HalfwayGoesToTheLowerCode)
{
    // bitsandbytes' decision trees compare x > midpoint: just above picks the upper code, at or below the lower.
    const auto &nf4 = bnb::code_table(QuantType::Nf4);
    const float mid = (nf4[9] + nf4[10]) * 0.5f;
    const at::Tensor x = at::tensor({1.0f, std::nextafter(mid, 1.0f), mid, std::nextafter(mid, 0.0f)}, at::kFloat);
    EXPECT_EQ(nibbles(bnb::quantize_4bit(x, QuantType::Nf4).packed, 4), (std::vector<int>{15, 10, 9, 9}));
}

TEST(Bnb4bit, EveryElementIsTheNearestCodeTimesItsBlocksAbsmax)
{
    for (QuantType type : {QuantType::Nf4, QuantType::Fp4})
        for (int64_t blocksize : {64, 128}) {
            at::manual_seed(3);
            const int64_t n = 3 * blocksize + 37; // a partial last block of 37
            const at::Tensor x = at::randn({n}, at::kFloat) * at::linspace(0.1, 5.0, n, at::kFloat);
            const auto q = bnb::quantize_4bit(x.view({-1, 1}), type, blocksize);
            ASSERT_EQ(q.state.absmax.numel(), 4);
            const auto &t = bnb::code_table(type);
            const std::vector<float> table(t.begin(), t.end()), xs = to_vector(x);
            const std::vector<float> absmax = to_vector(q.state.absmax);
            const std::vector<int> idx = nibbles(q.packed, n);
            const std::vector<float> deq = to_vector(bnb::dequantize_4bit(q.packed, q.state).view(-1));
            for (int64_t b = 0; b < 4; ++b) {
                float m = 0;
                for (int64_t i = b * blocksize; i < std::min(n, (b + 1) * blocksize); ++i) m = std::max(m, std::fabs(xs[i]));
                EXPECT_EQ(absmax[b], m) << "block " << b;
            }
            for (int64_t i = 0; i < n; ++i) {
                const float a = absmax[i / blocksize];
                const int want = argmin_code(table, xs[i] * (1.0f / a));
                // FP4's +0/-0 pair: the sign follows x (both dequantize to zero).
                if (type == QuantType::Fp4 && (want & 7) == 0) EXPECT_EQ(idx[i] & 7, 0) << i;
                else EXPECT_EQ(idx[i], want) << "type " << bnb::quant_type_name(type) << " element " << i;
                EXPECT_EQ(deq[i], table[idx[i]] * a) << i;
            }
        }
}

TEST(Bnb4bit, DequantizeReturnsTheShapeAndDtype)
{
    at::manual_seed(0);
    const at::Tensor w = at::randn({6, 21}, at::kBFloat16); // 126 values: an even count, 2 blocks
    const auto q = bnb::quantize_4bit(w, QuantType::Nf4);
    const at::Tensor d = bnb::dequantize_4bit(q.packed, q.state);
    EXPECT_EQ(d.sizes(), w.sizes());
    EXPECT_EQ(d.scalar_type(), at::kBFloat16);
    // NF4's largest gap is 1 - 0.7229568: no element is further than half of it times its absmax.
    EXPECT_LE((d.to(at::kFloat) - w.to(at::kFloat)).abs().max().item<float>(),
              0.5f * (1.0f - 0.7229568f) * w.to(at::kFloat).abs().max().item<float>() * 1.01f);
}

TEST(Bnb4bit, RefusesBadBlocksizesAndStates)
{
    const at::Tensor x = at::ones({10}, at::kFloat);
    EXPECT_THROW(bnb::quantize_4bit(x, QuantType::Nf4, 32), accel::Error);
    EXPECT_THROW(bnb::quantize_4bit(x, QuantType::Nf4, 96), accel::Error);
    EXPECT_THROW(bnb::quantize_4bit(x.to(at::kInt), QuantType::Nf4), accel::Error);
    auto q = bnb::quantize_4bit(x, QuantType::Nf4);
    q.state.shape = {11}; // 6 bytes needed, 5 given
    EXPECT_THROW(bnb::dequantize_4bit(q.packed, q.state), accel::Error);
    q.state.shape = {int64_t{1} << 40, int64_t{1} << 40}; // overflows
    EXPECT_THROW(bnb::dequantize_4bit(q.packed, q.state), accel::Error);
}

TEST(BnbDynamicMap, IsBitsandbytesCreateDynamicMap)
{
    // Entries of bitsandbytes' create_dynamic_map() (signed, 7 exponent bits), printed by torch 1.13 in Python.
    const at::Tensor m = bnb::dynamic_map();
    ASSERT_EQ(m.numel(), 256);
    const std::vector<std::pair<int, float>> known = {
        {0, -0x1.fc6666p-1f},  {1, -0x1.f53332p-1f}, {100, -0x1.e978d4p-8f}, {126, -0x1.27476ep-21f},
        {127, 0.0f},           {128, 0x1.27476ep-21f}, {129, 0x1.b43528p-19f}, {200, 0x1.de6668p-3f},
        {254, 0x1.fc6666p-1f}, {255, 1.0f}};
    for (const auto &[i, v] : known) EXPECT_EQ(m[i].item<float>(), v) << i;
    const std::vector<float> all = to_vector(m);
    for (int i = 1; i < 256; ++i) EXPECT_LT(all[i - 1], all[i]) << i;
}

TEST(BnbDoubleQuant, AbsmaxRoundTripIsTheNearestDynamicCode)
{
    at::manual_seed(5);
    const int64_t n = 64 * 300; // 300 absmax values: blocks of 256 and a partial one of 44
    const at::Tensor x = at::randn({n}, at::kFloat) * at::linspace(0.5, 2.0, n, at::kFloat);
    const auto plain = bnb::quantize_4bit(x, QuantType::Nf4, 64, false);
    const auto dq = bnb::quantize_4bit(x, QuantType::Nf4, 64, true);
    EXPECT_TRUE(at::equal(plain.packed, dq.packed)); // the codes do not depend on how absmax is stored
    ASSERT_TRUE(dq.state.nested);
    ASSERT_EQ(dq.state.absmax.scalar_type(), at::kByte);
    ASSERT_EQ(dq.state.nested_absmax.numel(), 2);
    const std::vector<float> absmax = to_vector(plain.state.absmax), dyn = to_vector(bnb::dynamic_map());
    const float offset = plain.state.absmax.mean().item<float>();
    EXPECT_EQ(dq.state.offset, offset);
    const std::vector<float> nested = to_vector(dq.state.nested_absmax);
    for (int b = 0; b < 2; ++b) {
        float m = 0;
        for (int i = b * 256; i < std::min(300, (b + 1) * 256); ++i) m = std::max(m, std::fabs(absmax[i] - offset));
        EXPECT_EQ(nested[b], m) << b;
    }
    const std::vector<float> back = to_vector(bnb::block_absmax(dq.state));
    const uint8_t *codes = dq.state.absmax.data_ptr<uint8_t>();
    for (int i = 0; i < 300; ++i) {
        const float a2 = nested[i / 256];
        EXPECT_EQ(codes[i], argmin_code(dyn, (absmax[i] - offset) * (1.0f / a2))) << i;
        EXPECT_EQ(back[i], dyn[codes[i]] * a2 + offset) << i;
        EXPECT_NEAR(back[i], absmax[i], 0.0072 * a2) << i; // the dynamic code's steps are at most 1.41 % of its range
    }
    // Dequantized weights follow the absmax as stored.
    const std::vector<float> deq = to_vector(bnb::dequantize_4bit(dq.packed, dq.state));
    const std::vector<int> idx = nibbles(dq.packed, n);
    for (int64_t i = 0; i < n; i += 97) EXPECT_EQ(deq[i], bnb::code_table(QuantType::Nf4)[idx[i]] * back[i / 64]) << i;
}
