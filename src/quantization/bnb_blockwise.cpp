#include "quantization/bnb_blockwise.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace accel::bnb {

at::Tensor dynamic_map()
{
    // As bitsandbytes builds it, in float32 tensors (torch.linspace, the midpoints, times a Python float), so
    // that every entry is the float bitsandbytes stores: 2^i + 1 boundaries in [0.1, 1], their midpoints scaled
    // by 10^(i-6), for i = 0..6, with both signs; then 0 and 1.
    std::vector<float> data;
    for (int i = 0; i < 7; ++i) {
        const at::Tensor b = at::linspace(0.1, 1.0, (int64_t{1} << i) + 1, at::kFloat);
        const at::Tensor means = (b.slice(0, 0, -1) + b.slice(0, 1)) / 2.0;
        const double scale = std::pow(10.0, i - 6);
        const at::Tensor pos = (means * scale).contiguous(), neg = (means * -scale).contiguous();
        data.insert(data.end(), pos.data_ptr<float>(), pos.data_ptr<float>() + pos.numel());
        data.insert(data.end(), neg.data_ptr<float>(), neg.data_ptr<float>() + neg.numel());
    }
    data.push_back(0.0f);
    data.push_back(1.0f);
    std::sort(data.begin(), data.end());
    return at::tensor(data, at::kFloat);
}

int nearest_code(const float *table, int n, float x)
{
    int i = 0;
    while (i + 1 < n && x > (table[i] + table[i + 1]) * 0.5f) ++i;
    return i;
}

namespace {

void check_blocksize(int64_t blocksize)
{
    require(blocksize > 0, ACCEL_ERR_INVALID_ARGUMENT,
            "quantize_blockwise: blocksize must be positive, got " + std::to_string(blocksize));
}

} // namespace

Blockwise8bit quantize_blockwise(const at::Tensor &x, const at::Tensor &code, int64_t blocksize)
{
    check_blocksize(blocksize);
    require(code.numel() == 256, ACCEL_ERR_INVALID_ARGUMENT, "quantize_blockwise: the code table must have 256 entries");
    const at::Tensor v = x.detach().to(at::kCPU, at::kFloat).contiguous().view(-1);
    const at::Tensor table = code.to(at::kCPU, at::kFloat).contiguous();
    const int64_t n = v.numel(), blocks = (n + blocksize - 1) / blocksize;
    Blockwise8bit q{at::empty({n}, at::kByte), at::empty({blocks}, at::kFloat), table, blocksize};
    const float *src = v.data_ptr<float>(), *t = table.data_ptr<float>();
    uint8_t *dst = q.codes.data_ptr<uint8_t>();
    float *absmax = q.absmax.data_ptr<float>();
    const int zero = nearest_code(t, 256, 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t lo = b * blocksize, hi = std::min(n, lo + blocksize);
        float m = 0.0f;
        for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(src[i]));
        absmax[b] = m;
        // bitsandbytes multiplies by the reciprocal of the block's absmax (its kernels' local_abs_max).
        const float inv = 1.0f / m;
        for (int64_t i = lo; i < hi; ++i)
            dst[i] = static_cast<uint8_t>(m == 0.0f ? zero : nearest_code(t, 256, std::clamp(src[i] * inv, -1.0f, 1.0f)));
    }
    return q;
}

at::Tensor dequantize_blockwise(const Blockwise8bit &q)
{
    check_blocksize(q.blocksize);
    const int64_t n = q.codes.numel();
    require(q.absmax.numel() == (n + q.blocksize - 1) / q.blocksize, ACCEL_ERR_INVALID_ARGUMENT,
            "dequantize_blockwise: " + std::to_string(q.absmax.numel()) + " absmax values for " + std::to_string(n) +
                " codes in blocks of " + std::to_string(q.blocksize));
    require(q.code.numel() == 256, ACCEL_ERR_INVALID_ARGUMENT, "dequantize_blockwise: the code table must have 256 entries");
    require(q.codes.scalar_type() == at::kByte, ACCEL_ERR_INVALID_ARGUMENT, "dequantize_blockwise: codes must be uint8");
    const at::Tensor codes = q.codes.to(at::kCPU).contiguous(), table = q.code.to(at::kCPU, at::kFloat).contiguous();
    const at::Tensor absmax = q.absmax.to(at::kCPU, at::kFloat).contiguous();
    at::Tensor out = at::empty({n}, at::kFloat);
    const uint8_t *c = codes.data_ptr<uint8_t>();
    const float *t = table.data_ptr<float>(), *a = absmax.data_ptr<float>();
    float *o = out.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) o[i] = t[c[i]] * a[i / q.blocksize];
    return out;
}

} // namespace accel::bnb
