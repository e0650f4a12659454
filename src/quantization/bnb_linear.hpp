// bitsandbytes' Linear4bit and Linear8bitLt as implementations of the linear seam (model/linear.hpp): they take a
// linear's place in a model (quantize_model.hpp) and compute from the quantized weight. The tensors are the
// model's own (the weight parameter, now packed uint8 or int8, and the quantization state registered as
// buffers under bitsandbytes' names), so state dicts, loading and moving the model see them. Frozen: the
// weight has no gradient; the input (and the bias) do, so that LoRA adapters over them train (QLoRA).
#pragma once

#include "config/bnb_quantization_config.hpp"
#include "model/linear.hpp"
#include "quantization/bnb_4bit.hpp"

#include <memory>
#include <optional>

namespace accel::bnb {

// The tensors of a 4-bit layer's quant state, as registered: absmax, quant_map, nested_absmax and
// nested_quant_map (undefined without double quantization) and quant_state (the packed JSON: blocksize, shape,
// dtype, offset). Read at each forward, so loaded values are the ones computed with.
struct QuantStateTensors {
    at::Tensor absmax, quant_map, nested_absmax, nested_quant_map, packed_meta;
};
// The QuantState those tensors describe; INVALID_ARGUMENT naming `module` when they do not fit together.
QuantState read_quant_state(const QuantStateTensors &t, const std::string &module);

// Linear4bit: y = x W_deq(compute dtype)ᵀ + b, W_deq the dequantized weight, cast to compute_dtype with x and b, and
// the result cast back to x's dtype (bitsandbytes' Linear4bit.forward).
std::shared_ptr<Linear> make_linear_4bit(std::string module, at::Tensor packed_weight, at::Tensor bias,
                                         QuantStateTensors state, at::ScalarType compute_dtype);

// Linear8bitLt (has_fp16_weights=False): LLM.int8's matmul (bnb_8bit.hpp) with `threshold`. In training its
// gradient to the input is grad · W_deq (bitsandbytes' MatMul8bitLt.backward), W_deq = CB · SCB / 127.
std::shared_ptr<Linear> make_linear_8bit(at::Tensor int8_weight, at::Tensor scb, at::Tensor bias, double threshold);

// What a layer made here was quantized with (load_in_4bit / load_in_8bit, the 4-bit type, double quantization,
// compute dtype; the int8 threshold); nullopt for any other linear.
std::optional<config::BnbQuantizationConfig> layer_quantization(const Linear &layer);

// Checks a quantized layer's state as loaded from a file against the layer (shapes, sizes, the quant_state JSON,
// finite statistics), so that a damaged or mismatched state fails when it is loaded rather than in a forward:
// INVALID_ARGUMENT naming the tensor (`module` + ".weight.absmax", ".SCB", ...). Nothing for other linears.
void check_quantized_layer(const Linear &layer, const std::string &module);

} // namespace accel::bnb
