// bitsandbytes' LLM.int8 (precision-and-quantization.md §3): int8 weights with a float32 absmax per row
// (SCB), and the vector-wise quantized matmul with the mixed-precision decomposition of outlier columns.
// Accelerate's load_in_8bit stores a linear layer's weight so (bitsandbytes' Linear8bitLt,
// has_fp16_weights=False).
#pragma once

#include <ATen/ATen.h>

namespace accel::bnb {

// Row-wise int8 quantization of a 2-D tensor: stats[r] = max |a[r, :]| (float32), q = round(a * 127 / stats[r]).
// threshold > 0: entries with |a| >= threshold are outliers; they are left out of the stats, and their whole
// columns are 0 in q (outlier_cols lists those columns, ascending). A row of zeros has stats 0 and q 0.
struct Int8Rows {
    at::Tensor q;            // int8 [rows, cols]
    at::Tensor stats;        // float32 [rows]
    at::Tensor outlier_cols; // int64 [k]
};
Int8Rows int8_vectorwise_quant(const at::Tensor &a, double threshold = 0.0);

// q * stats / 127 per row (bitsandbytes' int8_vectorwise_dequant), float32.
at::Tensor int8_vectorwise_dequant(const at::Tensor &q, const at::Tensor &stats);

// The exact int32 product a · bᵀ of int8 [t, k] and [o, k] (LibTorch's integer matmul on int32 copies; a sum
// of at most k products of 127² is exact in int32 for k < 133 000, checked).
at::Tensor int8_linear_matmul(const at::Tensor &a, const at::Tensor &b);

// c * (row_stats ⊗ col_stats) * 6.200124e-05 + bias, float32 (bitsandbytes' int8_mm_dequant; its constant).
at::Tensor int8_mm_dequant(const at::Tensor &c, const at::Tensor &row_stats, const at::Tensor &col_stats,
                           const at::Tensor &bias);

// LLM.int8's forward of x [..., in] through int8 weights cb [out, in] with row stats scb: x quantized row-wise
// (outliers at |x| >= threshold, threshold 0: none), the int8 product dequantized (+ bias) and cast to x's
// dtype, then the outlier columns of x times the dequantized weight's same columns added in x's dtype.
at::Tensor int8_linear(const at::Tensor &x, const at::Tensor &cb, const at::Tensor &scb, const at::Tensor &bias,
                       double threshold);

} // namespace accel::bnb
