#include "quantization/bnb_8bit.hpp"

#include "common/error.hpp"

#include <string>

namespace accel::bnb {

namespace {

// bitsandbytes' constants: 1/127, and its literal for 1/127² (6.200124e-05, not 6.2000124e-05; kept so the
// dequantized product is the one bitsandbytes computes).
constexpr double kInv127 = 7.874015718698502e-3;
constexpr double kInv127Squared = 6.200124e-05;

} // namespace

Int8Rows int8_vectorwise_quant(const at::Tensor &a, double threshold)
{
    require(a.dim() == 2, ACCEL_ERR_INVALID_ARGUMENT, "int8_vectorwise_quant: expects a 2-D tensor");
    at::Tensor x = a.detach().to(at::kFloat);
    at::Tensor outlier_cols = at::empty({0}, at::kLong);
    if (threshold > 0.0) {
        const at::Tensor outliers = x.abs() >= threshold;
        outlier_cols = outliers.any(0).nonzero().view(-1);
        x = x.masked_fill(outliers, 0.0);
    }
    at::Tensor stats = x.size(1) == 0 ? at::zeros({x.size(0)}, at::kFloat) : std::get<0>(x.abs().max(1));
    // 127 / 0 for a row of zeros would give NaN codes: such a row stores 0.
    const at::Tensor scale = at::where(stats > 0, 127.0 / stats, at::zeros_like(stats));
    at::Tensor q = at::round(x * scale.unsqueeze(1)).to(at::kChar);
    if (outlier_cols.numel() > 0) q.index_fill_(1, outlier_cols, 0);
    return {q, stats, outlier_cols};
}

at::Tensor int8_vectorwise_dequant(const at::Tensor &q, const at::Tensor &stats)
{
    return q.to(at::kFloat) * stats.to(at::kFloat).view({-1, 1}) * kInv127;
}

at::Tensor int8_linear_matmul(const at::Tensor &a, const at::Tensor &b)
{
    require(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1), ACCEL_ERR_INVALID_ARGUMENT,
            "int8_linear_matmul: expects int8 [t, k] and [o, k]");
    require(a.scalar_type() == at::kChar && b.scalar_type() == at::kChar, ACCEL_ERR_INVALID_ARGUMENT,
            "int8_linear_matmul: both operands must be int8");
    require(a.size(1) < 133000, ACCEL_ERR_INVALID_ARGUMENT,
            "int8_linear_matmul: k = " + std::to_string(a.size(1)) + " could overflow the int32 accumulator");
    // LibTorch has no integer matmul on CUDA. float64 holds every partial sum exactly (|sum| <= 127^2 k < 2^31,
    // far below 2^53), so in any order of summation the result is the same integers.
    if (a.is_cuda()) return at::mm(a.to(at::kDouble), b.to(at::kDouble).t()).to(at::kInt);
    return at::mm(a.to(at::kInt), b.to(at::kInt).t());
}

at::Tensor int8_mm_dequant(const at::Tensor &c, const at::Tensor &row_stats, const at::Tensor &col_stats,
                           const at::Tensor &bias)
{
    at::Tensor out = c.to(at::kFloat) * (row_stats.to(at::kFloat).view({-1, 1}) * col_stats.to(at::kFloat).view({1, -1})) *
                     kInv127Squared;
    if (bias.defined()) out = out + bias.to(at::kFloat);
    return out;
}

at::Tensor int8_linear(const at::Tensor &x, const at::Tensor &cb, const at::Tensor &scb, const at::Tensor &bias,
                       double threshold)
{
    require(x.dim() >= 1 && cb.dim() == 2 && x.size(-1) == cb.size(1), ACCEL_ERR_INVALID_ARGUMENT,
            "int8_linear: the input's last dimension must equal the weight's in_features");
    const at::Tensor flat = x.reshape({-1, x.size(-1)});
    const Int8Rows a = int8_vectorwise_quant(flat, threshold);
    at::Tensor out = int8_mm_dequant(int8_linear_matmul(a.q, cb), a.stats, scb, bias).to(x.scalar_type());
    if (a.outlier_cols.numel() > 0) {
        const at::Tensor sub_a = flat.index_select(1, a.outlier_cols);
        const at::Tensor sub_b = int8_vectorwise_dequant(cb.index_select(1, a.outlier_cols), scb).to(x.scalar_type());
        out = out.addmm(sub_a, sub_b.t());
    }
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = cb.size(0);
    return out.view(shape);
}

} // namespace accel::bnb
