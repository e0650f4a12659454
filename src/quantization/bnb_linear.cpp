#include "quantization/bnb_linear.hpp"

#include "common/error.hpp"
#include "config/bnb_quantization_config.hpp"
#include "quantization/bnb_8bit.hpp"

#include <ATen/core/grad_mode.h>

#include <string>

namespace accel::bnb {

namespace {

at::ScalarType dtype_named(const std::string &name)
{
    return name == "float16" ? at::kHalf : name == "bfloat16" ? at::kBFloat16 : at::kFloat;
}

// A statistic read from a file must be finite: a NaN or infinite scale would make every output of its layer so.
void require_finite(const at::Tensor &t, const std::string &name)
{
    if (!t.defined() || !at::isFloatingType(t.scalar_type())) return;
    require(at::isfinite(t).all().item<bool>(), ACCEL_ERR_INVALID_ARGUMENT, name + ": holds a NaN or infinite value");
}

class Linear4bit final : public Linear {
public:
    Linear4bit(std::string module, at::Tensor weight, at::Tensor bias, QuantStateTensors state, at::ScalarType compute)
        : module_(std::move(module)), weight_(std::move(weight)), bias_(std::move(bias)), state_(std::move(state)),
          compute_(compute)
    {
        const QuantState s = read_quant_state(state_, module_);
        require(s.shape.size() == 2, ACCEL_ERR_INVALID_ARGUMENT, module_ + ": a 4-bit linear weight must be 2-D");
        out_ = s.shape[0];
        in_ = s.shape[1];
        type_ = s.quant_type;
        nested_ = s.nested;
    }

    config::BnbQuantizationConfig quantization() const
    {
        config::BnbQuantizationConfig c;
        c.load_in_4bit = true;
        c.bnb_4bit_quant_type = quant_type_name(type_);
        c.bnb_4bit_use_double_quant = nested_;
        c.bnb_4bit_compute_dtype = compute_ == at::kFloat ? "fp32" : compute_ == at::kBFloat16 ? "bf16" : "fp16";
        return c;
    }

    // The state a file gave must describe this layer: its shape, the type its key names, sizes that dequantize.
    void check(const std::string &module) const
    {
        const std::string w = module + ".weight";
        const QuantState s = read_quant_state(state_, module);
        const std::string key = w + ".quant_state.bitsandbytes__" + quant_type_name(type_);
        require(s.quant_type == type_, ACCEL_ERR_INVALID_ARGUMENT,
                key + ": says quant_type \"" + quant_type_name(s.quant_type) + "\", the key and the config say \"" +
                    quant_type_name(type_) + "\"");
        require(s.shape == std::vector<int64_t>{out_, in_}, ACCEL_ERR_INVALID_ARGUMENT,
                key + ": says shape " + c10::str(at::IntArrayRef(s.shape)) + ", the layer is [" + std::to_string(out_) +
                    ", " + std::to_string(in_) + "]");
        require(s.nested == nested_, ACCEL_ERR_INVALID_ARGUMENT,
                key + (nested_ ? ": has no nested_offset, but the config asks for double quantization"
                               : ": has a nested_offset, but the config has no double quantization"));
        require_finite(state_.quant_map, w + ".quant_map");
        require_finite(s.nested ? state_.nested_absmax : state_.absmax, w + (s.nested ? ".nested_absmax" : ".absmax"));
        require_finite(state_.nested_quant_map, w + ".nested_quant_map");
        try {
            // Sizes only: dequantizing every layer here would cost a float layer's memory each (at load time).
            check_4bit_sizes(weight_, s);
            if (s.nested) (void)block_absmax(s); // the nested statistics' sizes (a block's worth of floats)
        } catch (const Error &e) {
            throw Error(e.code(), w + ": " + e.what());
        }
    }

    at::Tensor forward(const at::Tensor &x) override
    {
        const at::Tensor w = dequantize_4bit(weight_, read_quant_state(state_, module_)).to(compute_);
        const at::Tensor b = bias_.defined() ? bias_.to(compute_) : at::Tensor();
        return at::linear(x.to(compute_), w, b).to(x.scalar_type());
    }
    const at::Tensor &weight() const override { return weight_; }
    const at::Tensor &bias() const override { return bias_; }
    Layout layout() const override { return Layout::OutIn; }
    int64_t in_features() const override { return in_; }
    int64_t out_features() const override { return out_; }

private:
    std::string module_;
    at::Tensor weight_, bias_;
    QuantStateTensors state_;
    at::ScalarType compute_;
    int64_t in_ = 0, out_ = 0;
    QuantType type_ = QuantType::Fp4;
    bool nested_ = false;
};

class Linear8bit final : public Linear {
public:
    Linear8bit(at::Tensor weight, at::Tensor scb, at::Tensor bias, double threshold)
        : weight_(std::move(weight)), scb_(std::move(scb)), bias_(std::move(bias)), threshold_(threshold)
    {
    }

    at::Tensor forward(const at::Tensor &x) override
    {
        at::Tensor out;
        {
            at::NoGradGuard no_grad;
            out = int8_linear(x.detach(), weight_, scb_, bias_.defined() ? bias_.detach() : bias_, threshold_);
        }
        const bool bias_grad = bias_.defined() && bias_.requires_grad();
        if (!at::GradMode::is_enabled() || !(x.requires_grad() || bias_grad)) return out;
        // The quantized forward's value with the float layer's gradient (bitsandbytes' backward for a frozen
        // int8 weight): out + (y - y.detach()), y through the dequantized weight.
        const at::Tensor y = at::linear(x, int8_vectorwise_dequant(weight_, scb_).to(x.scalar_type()),
                                        bias_.defined() ? bias_.to(x.scalar_type()) : bias_);
        return out + (y - y.detach());
    }
    const at::Tensor &weight() const override { return weight_; }
    const at::Tensor &bias() const override { return bias_; }
    Layout layout() const override { return Layout::OutIn; }

    config::BnbQuantizationConfig quantization() const
    {
        config::BnbQuantizationConfig c;
        c.load_in_8bit = true;
        c.llm_int8_threshold = threshold_;
        return c;
    }

    void check(const std::string &module) const
    {
        require(weight_.dim() == 2 && weight_.scalar_type() == at::kChar, ACCEL_ERR_INVALID_ARGUMENT,
                module + ".weight: an 8-bit layer's weight must be a 2-D int8 tensor");
        require(scb_.dim() == 1 && scb_.numel() == weight_.size(0) && at::isFloatingType(scb_.scalar_type()),
                ACCEL_ERR_INVALID_ARGUMENT,
                module + ".SCB: must hold one float per row of the weight (" + std::to_string(weight_.size(0)) +
                    "), has shape " + c10::str(scb_.sizes()));
        require_finite(scb_, module + ".SCB");
    }

private:
    at::Tensor weight_, scb_, bias_;
    double threshold_;
};

} // namespace

QuantState read_quant_state(const QuantStateTensors &t, const std::string &module)
{
    const std::string what = module + ".weight.quant_state";
    require(t.packed_meta.defined() && t.packed_meta.scalar_type() == at::kByte && t.packed_meta.dim() == 1,
            ACCEL_ERR_INVALID_ARGUMENT, what + ": expected a 1-D uint8 tensor (bitsandbytes' packed JSON)");
    const at::Tensor bytes = t.packed_meta.to(at::kCPU).contiguous();
    const std::string text(reinterpret_cast<const char *>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
    const config::QuantStateMeta m = config::parse_quant_state_meta(text, what);
    QuantState s;
    s.quant_type = m.quant_type == "nf4" ? QuantType::Nf4 : QuantType::Fp4;
    s.blocksize = m.blocksize;
    s.shape = m.shape;
    s.dtype = dtype_named(m.dtype);
    s.absmax = t.absmax;
    s.code = t.quant_map;
    s.nested = m.nested;
    if (s.nested) {
        require(t.nested_absmax.defined() && t.nested_quant_map.defined(), ACCEL_ERR_INVALID_ARGUMENT,
                what + ": nested_offset is given but " + module + ".weight.nested_absmax / nested_quant_map are not");
        s.nested_absmax = t.nested_absmax;
        s.nested_code = t.nested_quant_map;
        s.nested_blocksize = m.nested_blocksize;
        s.offset = static_cast<float>(m.nested_offset);
    }
    return s;
}

std::shared_ptr<Linear> make_linear_4bit(std::string module, at::Tensor packed_weight, at::Tensor bias,
                                         QuantStateTensors state, at::ScalarType compute_dtype)
{
    return std::make_shared<Linear4bit>(std::move(module), std::move(packed_weight), std::move(bias), std::move(state),
                                        compute_dtype);
}

std::optional<config::BnbQuantizationConfig> layer_quantization(const Linear &layer)
{
    if (const auto *l = dynamic_cast<const Linear4bit *>(&layer)) return l->quantization();
    if (const auto *l = dynamic_cast<const Linear8bit *>(&layer)) return l->quantization();
    return std::nullopt;
}

void check_quantized_layer(const Linear &layer, const std::string &module)
{
    if (const auto *l = dynamic_cast<const Linear4bit *>(&layer)) l->check(module);
    if (const auto *l = dynamic_cast<const Linear8bit *>(&layer)) l->check(module);
}

std::shared_ptr<Linear> make_linear_8bit(at::Tensor int8_weight, at::Tensor scb, at::Tensor bias, double threshold)
{
    return std::make_shared<Linear8bit>(std::move(int8_weight), std::move(scb), std::move(bias), threshold);
}

} // namespace accel::bnb
