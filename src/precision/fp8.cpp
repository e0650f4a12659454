// The only file that includes LibTorch's custom autograd function header (it is heavy to compile).
#include "precision/fp8.hpp"

#include "common/error.hpp"
#include "precision/autocast.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <cfloat>
#include <cmath>

namespace accel::fp8 {

namespace {

struct Grid {
    int mantissa_bits;
    int min_exponent; // exponent of the smallest normal value
    float max;
};

Grid grid_of(Format f)
{
    // OCP FP8: E4M3 ("fn": no inf, max 1.75 * 2^8), E5M2 (IEEE-like, max 1.75 * 2^15).
    return f == Format::E4M3 ? Grid{3, -6, 448.0f} : Grid{2, -14, 57344.0f};
}

thread_local bool t_enabled = false;

} // namespace

float max_finite(Format format) { return grid_of(format).max; }

at::Tensor round_to_grid(const at::Tensor &x, Format format)
{
    const Grid g = grid_of(format);
    at::Tensor xf = x.to(at::kFloat);
    // x = m * 2^e with |m| in [0.5, 1): the binade's exponent is e - 1, and values below the smallest normal
    // (subnormals) share its spacing. Dividing by the spacing (a power of two) is exact, and at::round
    // rounds half to even, so this is the IEEE round-to-nearest-even cast onto the grid.
    at::Tensor exponent = std::get<1>(at::frexp(xf)); // int32; unspecified (in range) for inf and NaN
    at::Tensor spacing_log2 = at::clamp(at::clamp_min(exponent - 1, g.min_exponent) - g.mantissa_bits, -126, 127);
    // 2^k built from its bits (biased exponent k + 127, zero mantissa): exact, unlike a vectorised pow.
    at::Tensor spacing = ((spacing_log2 + 127) * (1 << 23)).to(at::kInt).view(at::kFloat);
    at::Tensor q = at::round(xf / spacing) * spacing;
    // Saturating cast (TransformerEngine casts with saturation to the largest finite value); NaN stays NaN.
    return at::clamp(q, -g.max, g.max);
}

at::Tensor quantize_dequantize(const at::Tensor &x, float scale, Format format)
{
    const float scale_inv = 1.0f / scale;
    return round_to_grid(x.to(at::kFloat) * scale, format) * scale_inv;
}

float amax(const at::Tensor &x)
{
    if (x.numel() == 0) return 0.0f;
    return x.detach().abs().max().item<float>();
}

DelayedScaling::DelayedScaling(Format format, const config::FP8RecipeKwargs &recipe)
    : format_(format),
      margin_(recipe.margin),
      interval_(recipe.interval),
      most_recent_(recipe.amax_compute_algo == "most_recent"),
      history_(static_cast<size_t>(recipe.amax_history_len), 0.0f)
{
    if (recipe.amax_history_len < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "amax_history_len: expected an integer >= 1");
    if (recipe.interval < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "interval: expected an integer >= 1");
}

void DelayedScaling::record(float value)
{
    float &slot = history_[0];
    if (std::isnan(value) || value > slot) slot = value;
}

void DelayedScaling::update()
{
    const size_t n = history_.size();
    float amax_value;
    if (most_recent_) {
        amax_value = history_[0];
    } else {
        amax_value = 0.0f;
        for (float h : history_) amax_value = std::fmax(amax_value, h); // fmaxf, as the kernel: NaN is ignored
    }
    // Roll by -1, then clear the slot the next step writes.
    const float newest = history_[0];
    for (size_t i = 0; i + 1 < n; ++i) history_[i] = history_[i + 1];
    history_[n - 1] = newest;
    history_[0] = 0.0f;

    if (++updates_ % interval_ != 0) return;
    if (std::isfinite(amax_value) && amax_value > 0.0f) {
        float s = max_finite(format_) / amax_value / std::exp2(static_cast<float>(margin_));
        // A tiny amax would give an infinite scale: TransformerEngine uses the largest float instead.
        if (!std::isfinite(s)) s = FLT_MAX;
        scale_ = s;
        scale_inv_ = 1.0f / s;
    }
}

LinearState::LinearState(const config::FP8RecipeKwargs &recipe)
    : input(Format::E4M3, recipe),
      weight(Format::E4M3, recipe),
      grad_output(recipe.fp8_format == "HYBRID" ? Format::E5M2 : Format::E4M3, recipe),
      fprop_high_precision(recipe.override_linear_precision[0]),
      dgrad_high_precision(recipe.override_linear_precision[1]),
      wgrad_high_precision(recipe.override_linear_precision[2])
{
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &input, const at::Tensor &weight,
                              const c10::optional<at::Tensor> &bias, const c10::intrusive_ptr<LinearState> &state)
    {
        NoAutocastScope no_autocast;
        const int64_t in_features = weight.size(1);
        at::Tensor x = input.to(at::kFloat).reshape({-1, in_features});
        at::Tensor w = weight.to(at::kFloat);
        // Delayed scaling: this step's cast uses the scale computed from earlier steps, then records its amax.
        at::Tensor xq = quantize_dequantize(x, state->input.scale(), state->input.format());
        at::Tensor wq = quantize_dequantize(w, state->weight.scale(), state->weight.format());
        state->input.record_and_update(fp8::amax(x));
        state->weight.record_and_update(fp8::amax(w));

        at::Tensor out = state->fprop_high_precision ? at::matmul(x, w.t()) : at::matmul(xq, wq.t());
        const bool has_bias = bias.has_value() && bias->defined();
        if (has_bias) out.add_(bias->to(at::kFloat));
        std::vector<int64_t> out_shape(input.sizes().begin(), input.sizes().end());
        out_shape.back() = weight.size(0);

        ctx->save_for_backward({state->wgrad_high_precision ? x : xq, state->dgrad_high_precision ? w : wq});
        ctx->saved_data["state"] = c10::IValue::make_capsule(state);
        ctx->saved_data["input_shape"] = input.sizes().vec();
        ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
        ctx->saved_data["has_bias"] = has_bias;
        return out.reshape(out_shape);
    }

    static variable_list backward(AutogradContext *ctx, variable_list grad_outputs)
    {
        NoAutocastScope no_autocast;
        const auto holder = ctx->saved_data["state"].toCapsule(); // keeps the state alive during backward
        LinearState *state = static_cast<LinearState *>(holder.get());
        auto saved = ctx->get_saved_variables();
        const at::Tensor &x = saved[0], &w = saved[1];
        const bool has_bias = ctx->saved_data["has_bias"].toBool();
        const auto input_shape = ctx->saved_data["input_shape"].toIntVector();
        const auto input_dtype = static_cast<at::ScalarType>(ctx->saved_data["input_dtype"].toInt());

        at::Tensor g = grad_outputs[0].to(at::kFloat).reshape({-1, w.size(0)});
        at::Tensor gq = quantize_dequantize(g, state->grad_output.scale(), state->grad_output.format());
        state->grad_output.record_and_update(fp8::amax(g));

        at::Tensor grad_input, grad_weight, grad_bias;
        if (ctx->needs_input_grad(0))
            grad_input = at::matmul(state->dgrad_high_precision ? g : gq, w).reshape(input_shape).to(input_dtype);
        if (ctx->needs_input_grad(1)) grad_weight = at::matmul((state->wgrad_high_precision ? g : gq).t(), x);
        // The bias gradient comes from the high-precision gradient (TransformerEngine's fused bgrad).
        if (has_bias && ctx->needs_input_grad(2)) grad_bias = g.sum(0);
        return {grad_input, grad_weight, grad_bias, at::Tensor()};
    }
};

} // namespace

at::Tensor linear(const at::Tensor &input, const at::Tensor &weight, const at::Tensor &bias,
                  const c10::intrusive_ptr<LinearState> &state)
{
    if (!state) fail(ACCEL_ERR_INTERNAL, "fp8::linear: no FP8 state");
    c10::optional<at::Tensor> b;
    if (bias.defined()) b = bias;
    return Fp8LinearFunction::apply(input, weight, b, state);
}

bool enabled() { return t_enabled; }

Fp8Scope::Fp8Scope(bool on) : prev_(t_enabled) { t_enabled = on; }

Fp8Scope::~Fp8Scope() { t_enabled = prev_; }

} // namespace accel::fp8
