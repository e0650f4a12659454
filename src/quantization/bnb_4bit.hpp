// bitsandbytes' 4-bit block-wise quantization, FP4 and NF4 (QLoRA; precision-and-quantization.md §4): what
// Accelerate's load_in_4bit stores a linear layer's weight as. Two codes per byte, a float32 absmax per block
// of `blocksize` values, optionally itself quantized to 8 bits (double quantization, bnb_blockwise.hpp).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace accel::bnb {

enum class QuantType { Fp4, Nf4 };

// The 16 values of the code, by index (the spec's tables; FP4's index 8 is -0).
const std::array<float, 16> &code_table(QuantType type);
const char *quant_type_name(QuantType type); // "fp4", "nf4"

// bitsandbytes' QuantState of a 4-bit tensor.
struct QuantState {
    QuantType quant_type = QuantType::Fp4;
    int64_t blocksize = 64;
    at::Tensor absmax; // float32 [blocks]; with double quantization the uint8 codes of (absmax - offset)
    at::Tensor code;   // quant_map: float32 [16]
    std::vector<int64_t> shape;
    at::ScalarType dtype = at::kFloat; // of the tensor quantized (what dequantization returns)
    // Double quantization (compress_statistics): absmax holds codes of the dynamic map in blocks of
    // nested_blocksize, each with its own float32 nested_absmax; offset = the mean of the absmax.
    bool nested = false;
    at::Tensor nested_absmax; // float32
    at::Tensor nested_code;   // nested_quant_map: float32 [256]
    int64_t nested_blocksize = 256;
    float offset = 0.0f;

    int64_t numel() const;
};

struct Quantized4bit {
    at::Tensor packed; // uint8 [(numel + 1) / 2, 1]: element 2k in the high nibble, 2k+1 in the low one
    QuantState state;
};

// Quantizes x (float32, float16 or bfloat16). blocksize: a power of two in 64..4096 (bitsandbytes' range).
// A value is scaled by its block's reciprocal absmax (clamped to [-1, 1]) and stored as the nearest code
// (FP4: sign bit, then the nearest magnitude, as bitsandbytes' dQuantizeFP4). An odd count is padded
// with the code of 0.
Quantized4bit quantize_4bit(const at::Tensor &x, QuantType type, int64_t blocksize = 64,
                            bool compress_statistics = false);
// What quantize_4bit returns for a tensor of `shape` and `dtype`, with every tensor on the meta device (shapes
// and dtypes only): the layout of a layer whose values are read from a file later (empty init).
Quantized4bit empty_4bit(at::IntArrayRef shape, at::ScalarType dtype, QuantType type, int64_t blocksize = 64,
                         bool compress_statistics = false);
// Each block's absmax, float32 (undoing double quantization).
at::Tensor block_absmax(const QuantState &state);
// code[index] * absmax[block], reshaped to state.shape, in state.dtype. Checks the sizes of what it reads
// (a state from a file): INVALID_ARGUMENT naming the mismatch.
at::Tensor dequantize_4bit(const at::Tensor &packed, const QuantState &state);
// The checks dequantize_4bit makes of the sizes (INVALID_ARGUMENT naming the mismatch), without dequantizing.
void check_4bit_sizes(const at::Tensor &packed, const QuantState &state);

} // namespace accel::bnb
