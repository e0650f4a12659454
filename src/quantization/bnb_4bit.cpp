#include "quantization/bnb_4bit.hpp"

#include "common/error.hpp"
#include "quantization/bnb_blockwise.hpp"

#include <c10/util/accumulate.h>

#include <algorithm>
#include <cmath>

namespace accel::bnb {

namespace {

// FP4 (E2M1-style) raw values by index, divided by their maximum 12 as bitsandbytes' get_4bit_type does
// (in float32); the MSB of the index is the sign.
std::array<float, 16> make_fp4()
{
    const float raw[16] = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f,
                           -0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f, -3.0f};
    std::array<float, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = raw[i] / 12.0f;
    return t;
}

const std::array<float, 16> kNf4 = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
                                    0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
                                    0.7229568362236023f, 1.0f};

// FP4's non-negative magnitudes ascending, and the index each has in the table.
const float kFp4Magnitudes[8] = {0.0f, 0.0625f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f,
                                 4.0f / 12.0f, 6.0f / 12.0f, 8.0f / 12.0f, 1.0f};
const uint8_t kFp4MagnitudeIndex[8] = {0, 1, 6, 7, 4, 5, 2, 3};

uint8_t encode(QuantType type, float v)
{
    if (type == QuantType::Nf4) return static_cast<uint8_t>(nearest_code(kNf4.data(), 16, v));
    const uint8_t sign = v < 0.0f ? 0x8 : 0x0;
    return sign | kFp4MagnitudeIndex[nearest_code(kFp4Magnitudes, 8, std::fabs(v))];
}

void check_blocksize(int64_t blocksize, const char *what)
{
    require(blocksize >= 64 && blocksize <= 4096 && (blocksize & (blocksize - 1)) == 0, ACCEL_ERR_INVALID_ARGUMENT,
            std::string(what) + ": blocksize must be a power of two in 64..4096 (bitsandbytes' range), got " +
                std::to_string(blocksize));
}

int64_t blocks_of(int64_t n, int64_t blocksize) { return (n + blocksize - 1) / blocksize; }

} // namespace

const std::array<float, 16> &code_table(QuantType type)
{
    static const std::array<float, 16> fp4 = make_fp4();
    return type == QuantType::Nf4 ? kNf4 : fp4;
}

const char *quant_type_name(QuantType type) { return type == QuantType::Nf4 ? "nf4" : "fp4"; }

int64_t QuantState::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        require(d >= 0 && !__builtin_mul_overflow(n, d, &n), ACCEL_ERR_INVALID_ARGUMENT,
                "4-bit quant state: the shape has a negative dimension or too many elements");
    return n;
}

Quantized4bit quantize_4bit(const at::Tensor &x, QuantType type, int64_t blocksize, bool compress_statistics)
{
    check_blocksize(blocksize, "quantize_4bit");
    require(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
            ACCEL_ERR_INVALID_ARGUMENT, "quantize_4bit: the tensor must be float32, float16 or bfloat16");
    const at::Tensor v = x.detach().to(at::kCPU, at::kFloat).contiguous().view(-1);
    const int64_t n = v.numel(), blocks = blocks_of(n, blocksize);
    const float *src = v.data_ptr<float>();
    at::Tensor absmax = at::empty({blocks}, at::kFloat);
    at::Tensor packed = at::zeros({(n + 1) / 2, 1}, at::kByte);
    float *am = absmax.data_ptr<float>();
    uint8_t *dst = packed.data_ptr<uint8_t>();
    const uint8_t zero = encode(type, 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t lo = b * blocksize, hi = std::min(n, lo + blocksize);
        float m = 0.0f;
        for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(src[i]));
        am[b] = m;
        const float inv = 1.0f / m; // bitsandbytes scales by the reciprocal (local_abs_max)
        for (int64_t i = lo; i < hi; ++i) {
            const uint8_t q = m == 0.0f ? zero : encode(type, std::clamp(src[i] * inv, -1.0f, 1.0f));
            dst[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? q << 4 : q);
        }
    }
    if (n % 2 == 1) dst[n / 2] |= zero; // the pad value 0.0 in the last low nibble

    const auto &table = code_table(type);
    Quantized4bit out{packed, QuantState{}};
    QuantState &s = out.state;
    s.quant_type = type;
    s.blocksize = blocksize;
    s.code = at::tensor(std::vector<float>(table.begin(), table.end()), at::kFloat);
    s.shape = x.sizes().vec();
    s.dtype = x.scalar_type();
    if (!compress_statistics) {
        s.absmax = absmax;
        return out;
    }
    // bitsandbytes' compress_statistics: centre the absmax on their mean and store them 8-bit.
    s.nested = true;
    s.offset = absmax.mean().item<float>();
    Blockwise8bit q = quantize_blockwise(absmax - s.offset, dynamic_map(), s.nested_blocksize);
    s.absmax = q.codes;
    s.nested_absmax = q.absmax;
    s.nested_code = q.code;
    return out;
}

Quantized4bit empty_4bit(at::IntArrayRef shape, at::ScalarType dtype, QuantType type, int64_t blocksize,
                         bool compress_statistics)
{
    require(blocksize > 0, ACCEL_ERR_INVALID_ARGUMENT, "empty_4bit: blocksize must be positive");
    const at::TensorOptions meta = at::TensorOptions().device(at::kMeta);
    const int64_t n = c10::multiply_integers(shape), blocks = (n + blocksize - 1) / blocksize;
    Quantized4bit out{at::empty({(n + 1) / 2, 1}, meta.dtype(at::kByte)), QuantState{}};
    QuantState &s = out.state;
    s.quant_type = type;
    s.blocksize = blocksize;
    s.code = at::empty({16}, meta.dtype(at::kFloat));
    s.shape = shape.vec();
    s.dtype = dtype;
    s.nested = compress_statistics;
    s.absmax = at::empty({blocks}, meta.dtype(compress_statistics ? at::kByte : at::kFloat));
    if (compress_statistics) {
        s.nested_absmax = at::empty({(blocks + s.nested_blocksize - 1) / s.nested_blocksize}, meta.dtype(at::kFloat));
        s.nested_code = at::empty({256}, meta.dtype(at::kFloat));
    }
    return out;
}

at::Tensor block_absmax(const QuantState &s)
{
    if (!s.nested) return s.absmax.to(at::kCPU, at::kFloat).contiguous();
    require(s.nested_blocksize > 0, ACCEL_ERR_INVALID_ARGUMENT, "dequantize_4bit: nested_blocksize must be positive");
    return dequantize_blockwise(Blockwise8bit{s.absmax, s.nested_absmax, s.nested_code, s.nested_blocksize}) + s.offset;
}

void check_4bit_sizes(const at::Tensor &packed, const QuantState &s)
{
    check_blocksize(s.blocksize, "dequantize_4bit");
    const int64_t n = s.numel(), blocks = blocks_of(n, s.blocksize);
    require(packed.scalar_type() == at::kByte && packed.numel() == (n + 1) / 2, ACCEL_ERR_INVALID_ARGUMENT,
            "dequantize_4bit: the packed weight must be " + std::to_string((n + 1) / 2) + " uint8 values for " +
                std::to_string(n) + " elements, got " + std::to_string(packed.numel()));
    require(s.absmax.numel() == blocks, ACCEL_ERR_INVALID_ARGUMENT,
            "dequantize_4bit: absmax must have " + std::to_string(blocks) + " values (blocks of " +
                std::to_string(s.blocksize) + "), got " + std::to_string(s.absmax.numel()));
    require(s.code.numel() == 16, ACCEL_ERR_INVALID_ARGUMENT, "dequantize_4bit: quant_map must have 16 values");
}

at::Tensor dequantize_4bit(const at::Tensor &packed, const QuantState &s)
{
    check_4bit_sizes(packed, s);
    const int64_t n = s.numel(), blocks = blocks_of(n, s.blocksize);
    // In tensor ops (this runs in every forward of a 4-bit layer): each byte looks up its two values at once in a
    // 256 x 2 table (high nibble first), then each block is scaled by its absmax (float32, as the element-wise
    // definition in the header).
    const at::Tensor absmax = block_absmax(s).to(packed.device());
    const at::Tensor code = s.code.to(packed.device(), at::kFloat);
    const at::Tensor byte = at::arange(256, at::TensorOptions().dtype(at::kLong).device(packed.device()));
    const at::Tensor pairs = at::stack({code.index_select(0, byte.div(16, "floor")), code.index_select(0, byte.remainder(16))}, 1);
    at::Tensor v = pairs.index_select(0, packed.reshape({-1}).to(at::kLong)).view({-1}).slice(0, 0, n);
    v = at::constant_pad_nd(v, {0, blocks * s.blocksize - n}).view({blocks, s.blocksize}) * absmax.view({blocks, 1});
    return v.view({-1}).slice(0, 0, n).view(s.shape).to(s.dtype);
}

} // namespace accel::bnb
