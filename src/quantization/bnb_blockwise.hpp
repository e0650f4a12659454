// bitsandbytes' 8-bit block-wise quantization with the signed "dynamic" code
// (precision-and-quantization.md §4, double quantization): what double quantization stores the 4-bit layers'
// block absmax with. Accelerate reaches it through bitsandbytes (utils/bnb.py); accel computes it here.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace accel::bnb {

// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): 256 ascending float32 values in [-1, 1]
// (127 positive, 127 negative, 0 and 1).
at::Tensor dynamic_map();

// Index of the entry of the ascending `table` (n values) nearest to x: the number of midpoints between
// consecutive entries that x lies above (bitsandbytes' decision trees: exactly halfway goes to the lower entry).
int nearest_code(const float *table, int n, float x);

// The result of quantize_blockwise: uint8 codes (one per value, flat) and each block's absmax (float32).
struct Blockwise8bit {
    at::Tensor codes;  // uint8 [numel]
    at::Tensor absmax; // float32 [ceil(numel / blocksize)]
    at::Tensor code;   // the code table used (float32 [256])
    int64_t blocksize = 256;
};

// Flattens x (any float dtype), takes each block's max |x| (a last partial block its own), scales by it into
// [-1, 1] and stores the nearest entry of `code`. A block of zeros has absmax 0 and stores code's 0.
Blockwise8bit quantize_blockwise(const at::Tensor &x, const at::Tensor &code, int64_t blocksize);
// code[codes] * absmax[block], float32, flat.
at::Tensor dequantize_blockwise(const Blockwise8bit &q);

} // namespace accel::bnb
