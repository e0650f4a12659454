// FP8 training, emulated: TransformerEngine's per-tensor delayed scaling for Linear layers, with values
// rounded to the FP8 grids (E4M3, E5M2) and kept in float32 (LibTorch 1.13 has no float8 dtypes).
//
// A Linear layer of a prepared model casts its input and weight (forward, E4M3) and its output gradient
// (backward, E5M2 for HYBRID, E4M3 for E4M3) to FP8 with a scale computed from earlier steps' amax
// history, runs the GEMMs on the dequantized values in float32, and records this step's amax.
#pragma once

#include "config/accelerator_config.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace accel::fp8 {

enum class Format { E4M3, E5M2 };

// Largest finite value: 448 (E4M3) or 57344 (E5M2).
float max_finite(Format format);

// Rounds float32 values to the nearest value of the FP8 grid (ties to even), saturating at
// ±max_finite (also ±inf); NaN stays NaN. Result in float32.
at::Tensor round_to_grid(const at::Tensor &x, Format format);

// Dequantized FP8 cast: round_to_grid(x * scale) * (1 / scale), in float32.
at::Tensor quantize_dequantize(const at::Tensor &x, float scale, Format format);

// max |x| as float (NaN if x holds a NaN; 0 for an empty tensor).
float amax(const at::Tensor &x);

// One FP8 tensor slot of TransformerEngine's DelayedScaling recipe: amax history, scale, scale_inv.
class DelayedScaling {
public:
    DelayedScaling(Format format, const config::FP8RecipeKwargs &recipe);

    Format format() const { return format_; }
    float scale() const { return scale_; }
    float scale_inv() const { return scale_inv_; }
    const std::vector<float> &amax_history() const { return history_; }

    // The amax of this step's cast goes into history slot 0 (the largest if cast several times).
    void record(float amax);
    // TransformerEngine's update kernel: amax = history[0] ("most_recent") or max(history) ("max");
    // the history rolls by -1 (new[i] = old[i+1], new[L-1] = old[0]) and new[0] = 0; every `interval`-th
    // update the scale becomes (fp8_max / amax) / 2^margin when amax is finite and > 0 (else it stays).
    void update();
    void record_and_update(float value)
    {
        record(value);
        update();
    }

private:
    Format format_;
    int64_t margin_;
    int64_t interval_;
    bool most_recent_;
    std::vector<float> history_;
    int64_t updates_ = 0;
    float scale_ = 1.0f;
    float scale_inv_ = 1.0f;
};

// Per-Linear-layer FP8 state: input and weight (forward format) and output gradient (backward format).
struct LinearState : torch::CustomClassHolder {
    explicit LinearState(const config::FP8RecipeKwargs &recipe);
    DelayedScaling input;
    DelayedScaling weight;
    DelayedScaling grad_output;
    bool fprop_high_precision;
    bool dgrad_high_precision;
    bool wgrad_high_precision;
};

// y = x Wᵀ + b through the FP8 emulation, differentiable with respect to input, weight and bias.
// `bias` may be undefined. Autocast is off inside: the GEMMs run in float32 on FP8-grid values.
at::Tensor linear(const at::Tensor &input, const at::Tensor &weight, const at::Tensor &bias,
                  const c10::intrusive_ptr<LinearState> &state);

// Thread-local switch, as TransformerEngine's fp8_autocast: Linear layers of models prepared with
// "fp8" use the emulation only inside an enabled scope.
bool enabled();
class Fp8Scope {
public:
    explicit Fp8Scope(bool on);
    ~Fp8Scope();
    Fp8Scope(const Fp8Scope &) = delete;
    Fp8Scope &operator=(const Fp8Scope &) = delete;

private:
    bool prev_;
};

} // namespace accel::fp8
