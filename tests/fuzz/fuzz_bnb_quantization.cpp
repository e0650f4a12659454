// bitsandbytes quantization inputs (src/quantization, src/config/bnb_quantization_config.cpp): the first byte picks
// the reader (modulo 3). 0: accel_model_quantize's BnbQuantizationConfig JSON (with load_and_quantize_model's
// torch_dtype and placement keys). 1: a 4-bit layer's state as a state
// dict holds it (the packed quant_state JSON, with weight / absmax / quant_map / nested tensors of sizes the next
// four bytes give), read and dequantized as a forward does. 2: a pre-quantized folder's config.json (its
// quantization_config), whose accepted config must read back the same after save_pretrained writes it.
#include "config/bnb_quantization_config.hpp"
#include "fuzz_common.hpp"
#include "quantization/bnb_4bit.hpp"
#include "quantization/bnb_linear.hpp"

#include <ATen/ATen.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    if (size < 5) return 0;
    const std::string text = fuzz::text_of(data + 5, size - 5);
    if (data[0] % 3 == 2) {
        std::optional<config::BnbQuantizationConfig> c;
        if (!fuzz::accepts([&] { c = config::parse_hf_quantization_config(text, "config.json"); }) || !c) return 0;
        if (c->load_in_4bit == c->load_in_8bit) fuzz::finding("a quantization_config with neither or both: " + text);
        const std::string written = config::hf_config_with_quantization("{}", &*c);
        std::optional<config::BnbQuantizationConfig> back;
        if (!fuzz::accepts([&] { back = config::parse_hf_quantization_config(written, "written"); }) || !back ||
            back->load_in_4bit != c->load_in_4bit || back->bnb_4bit_quant_type != c->bnb_4bit_quant_type ||
            back->bnb_4bit_use_double_quant != c->bnb_4bit_use_double_quant ||
            back->skip_modules != c->skip_modules || back->llm_int8_threshold != c->llm_int8_threshold ||
            (c->load_in_4bit && back->bnb_4bit_compute_dtype != c->bnb_4bit_compute_dtype))
            fuzz::finding("quantization_config does not read back as written: " + text + " -> " + written);
        return 0;
    }
    if (data[0] % 3 == 0) {
        config::BnbQuantizationConfig c;
        if (!fuzz::accepts([&] { c = config::parse_bnb_quantization_config(text.c_str(), "bnb_config_json"); })) return 0;
        if (c.load_in_4bit == c.load_in_8bit || c.llm_int8_threshold < 0.0)
            fuzz::finding("a quantization config accepted with unusable values: " + text);
        // load_and_quantize_model's placement keys act only while loading weights_location; float16 cannot compute.
        if ((c.placement && c.weights_location.empty()) || c.torch_dtype == ACCEL_DTYPE_FLOAT16)
            fuzz::finding("a quantization config accepted with placement keys and no weights_location, or float16: " +
                          text);
        return 0;
    }
    // Small tensors (the packed weight: byte 1 times 64 bytes), the JSON says the rest.
    bnb::QuantStateTensors t;
    const at::Tensor weight = at::zeros({int64_t{data[1]} * 64, 1}, at::kByte);
    // Byte 2: absmax's count (half of it) and dtype (even: float32, odd: uint8 codes as double quantization stores).
    const int64_t blocks = data[2] / 2;
    t.absmax = data[2] % 2 == 0 ? at::ones({blocks}, at::kFloat) : at::zeros({blocks}, at::kByte);
    t.quant_map = at::linspace(-1.0, 1.0, data[3] % 20, at::kFloat);
    if (data[4] != 0) {
        t.nested_absmax = at::ones({int64_t{data[4]} % 8}, at::kFloat);
        t.nested_quant_map = at::linspace(-1.0, 1.0, data[4] == 1 ? 256 : data[4], at::kFloat);
    }
    t.packed_meta = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
    std::copy(text.begin(), text.end(), t.packed_meta.data_ptr<uint8_t>());
    fuzz::accepts([&] {
        const bnb::QuantState s = bnb::read_quant_state(t, "layer");
        const at::Tensor w = bnb::dequantize_4bit(weight, s);
        if (w.numel() != s.numel()) fuzz::finding("dequantized " + std::to_string(w.numel()) + " values: " + text);
    });
    return 0;
}
