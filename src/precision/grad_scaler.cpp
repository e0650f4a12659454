#include "precision/grad_scaler.hpp"

#include "common/error.hpp"

#include <ATen/core/grad_mode.h>
#include <algorithm>
#include <cmath>

namespace accel {

GradScaler::GradScaler(const config::GradScalerKwargs &kwargs)
    : ds_(kwargs.deepspeed),
      enabled_(kwargs.enabled),
      init_scale_(ds_ ? (ds_->loss_scale > 0.0 ? ds_->loss_scale : ds_->initial_scale) : kwargs.init_scale),
      growth_factor_(kwargs.growth_factor),
      backoff_factor_(kwargs.backoff_factor),
      growth_interval_(kwargs.growth_interval)
{
    // The config parser already rejects these with the JSON path; this guards other callers.
    if (!(init_scale_ > 0.0) || !std::isfinite(init_scale_))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "init_scale: expected a finite number > 0, got " + std::to_string(init_scale_));
    if (!(growth_factor_ > 1.0) || !std::isfinite(growth_factor_))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "growth_factor: expected a number > 1, got " + std::to_string(growth_factor_));
    if (!(backoff_factor_ > 0.0 && backoff_factor_ < 1.0))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "backoff_factor: expected a number > 0 and < 1, got " +
                                             std::to_string(backoff_factor_));
    if (growth_interval_ < 1 || growth_interval_ > INT32_MAX)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "growth_interval: expected an integer in 1..2147483647, got " +
                                             std::to_string(growth_interval_));
    if (ds_) ds_hysteresis_ = ds_->hysteresis;
}

void GradScaler::update_deepspeed(bool overflow, float &scale)
{
    const config::DeepSpeedLossScale &d = *ds_;
    if (d.loss_scale > 0.0) return; // static
    if (overflow) {
        if (d.hysteresis == 1 || ds_hysteresis_ == 1) {
            if (static_cast<double>(scale) <= d.min_loss_scale)
                fail(ACCEL_ERR_OUT_OF_RANGE, "gradient scaler (DeepSpeed fp16): the loss scale is already at "
                                             "min_loss_scale (" + std::to_string(d.min_loss_scale) +
                                             ") and the gradients overflowed again; DeepSpeed stops the run here");
            scale = static_cast<float>(std::max(static_cast<double>(scale) / 2.0, d.min_loss_scale));
        } else {
            --ds_hysteresis_;
        }
        ds_last_overflow_iter_ = ds_iter_;
    } else {
        if (d.consecutive_hysteresis) ds_hysteresis_ = d.hysteresis;
        if ((ds_iter_ - ds_last_overflow_iter_) % d.loss_scale_window == 0) {
            if (!d.consecutive_hysteresis) ds_hysteresis_ = d.hysteresis;
            scale = static_cast<float>(static_cast<double>(scale) * 2.0);
        }
    }
    ++ds_iter_;
}

void GradScaler::check_scale_initialised(const char *funcname) const
{
    if (!scale_.defined())
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             std::string("gradient scaler: ") + funcname + " before any loss was scaled; compute gradients with "
                                                           "accel_accelerator_backward, which scales the loss under fp16");
}

at::Tensor GradScaler::scale(const at::Tensor &outputs)
{
    if (!enabled_) return outputs;
    if (!scale_.defined()) {
        const auto opts = at::TensorOptions().device(outputs.device());
        scale_ = at::full({}, init_scale_, opts.dtype(at::kFloat));
        growth_tracker_ = at::full({}, init_growth_tracker_, opts.dtype(at::kInt));
    }
    return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

void GradScaler::reduce_found_inf_across_ranks(at::Tensor &found_inf) const
{
    // One process: the local flag is already the global one. A distributed backend plugs its
    // all-reduce (MAX) in through set_found_inf_reducer().
    if (reducer_) reducer_(found_inf);
}

void GradScaler::unscale_(const void *optimizer, const std::vector<at::Tensor> &params)
{
    if (!enabled_) return;
    check_scale_initialised("unscale_");
    OptimizerState &st = per_optimizer_[optimizer];
    if (st.stage == Stage::Unscaled)
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             "optimizer: its gradients were already unscaled since the last optimizer step (unscale_gradients, "
             "clip_grad_norm and clip_grad_value unscale once per step; call them only when sync_gradients is true)");
    if (st.stage == Stage::Stepped)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: unscale_ is being called after step() and before update()");

    at::NoGradGuard no_grad;
    // As PyTorch: the reciprocal is taken in float64, then cast to float32.
    const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
    const bool identity = inv_scale.item<float>() == 1.0f;
    at::Tensor found;
    for (const auto &p : params) {
        const at::Tensor &g = p.grad();
        if (!g.defined()) continue;
        if (g.scalar_type() == at::kHalf)
            fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: attempting to unscale FP16 gradients; master weights "
                                                "and their gradients must be float32");
        if (!found.defined()) found = at::zeros({}, scale_.options());
        // _amp_foreach_non_finite_check_and_unscale_: flag any inf/NaN, then multiply (also non-finite
        // values) by inv_scale in float32; the multiplication is skipped when inv_scale is exactly 1.
        found.masked_fill_(at::logical_not(at::isfinite(g).all()).to(found.device()), 1.0);
        if (!identity) g.mul_(inv_scale.to(g.device(), /*non_blocking=*/true));
    }
    if (found.defined()) reduce_found_inf_across_ranks(found);
    st.found_inf = found;
    st.stage = Stage::Unscaled;
}

bool GradScaler::step(const void *optimizer, const std::vector<at::Tensor> &params,
                      const std::function<void()> &optimizer_step)
{
    if (!enabled_) {
        optimizer_step();
        return true;
    }
    check_scale_initialised("step");
    if (per_optimizer_[optimizer].stage == Stage::Stepped)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: step() was already called since the last update()");
    if (per_optimizer_[optimizer].stage == Stage::Ready) unscale_(optimizer, params);
    OptimizerState &st = per_optimizer_[optimizer];
    if (!st.found_inf.defined())
        fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: no inf checks were recorded for this optimizer: none of its "
                                            "parameters has a gradient (run accel_accelerator_backward first)");
    bool stepped = false;
    // DeepSpeed's static scaler does not look for overflows: it always steps.
    if (st.found_inf.item<float>() == 0.0f || (ds_ && ds_->loss_scale > 0.0)) {
        optimizer_step();
        stepped = true;
    }
    st.stage = Stage::Stepped;
    return stepped;
}

void GradScaler::update()
{
    if (!enabled_) return;
    check_scale_initialised("update");
    at::Tensor combined;
    for (const auto &entry : per_optimizer_) {
        const at::Tensor &f = entry.second.found_inf;
        if (!f.defined()) continue;
        combined = combined.defined() ? combined + f.to(combined.device()) : f;
    }
    if (!combined.defined())
        fail(ACCEL_ERR_FAILED_PRECONDITION, "gradient scaler: no inf checks were recorded prior to update() (no "
                                            "optimizer was unscaled or stepped since the last update)");
    // _amp_update_scale_ (the CUDA and CPU kernels): float32 scale, int32 tracker, float64 factors; the
    // product is rounded back to float32, and growth never takes the scale to inf.
    float scale = scale_.item<float>();
    int32_t tracker = growth_tracker_.item<int32_t>();
    if (ds_) {
        update_deepspeed(combined.item<float>() != 0.0f, scale);
    } else if (combined.item<float>() != 0.0f) {
        scale = static_cast<float>(static_cast<double>(scale) * backoff_factor_);
        tracker = 0;
    } else {
        const int64_t successful = static_cast<int64_t>(tracker) + 1;
        if (successful == growth_interval_) {
            const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor_);
            if (std::isfinite(grown)) scale = grown;
            tracker = 0;
        } else {
            tracker = static_cast<int32_t>(successful);
        }
    }
    scale_.fill_(static_cast<double>(scale));
    growth_tracker_.fill_(static_cast<int64_t>(tracker));
    per_optimizer_.clear();
}

void GradScaler::update(double new_scale)
{
    if (!enabled_) return;
    check_scale_initialised("update");
    if (!(new_scale > 0.0) || !std::isfinite(static_cast<float>(new_scale)))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "new_scale: expected a finite float32 number > 0, got " + std::to_string(new_scale));
    scale_.fill_(new_scale);
    per_optimizer_.clear();
}

double GradScaler::get_scale() const
{
    if (!enabled_) return 1.0;
    return scale_.defined() ? static_cast<double>(scale_.item<float>()) : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const
{
    if (!enabled_) return 0;
    return growth_tracker_.defined() ? static_cast<int64_t>(growth_tracker_.item<int32_t>()) : init_growth_tracker_;
}

GradScaler::Stage GradScaler::stage(const void *optimizer) const
{
    auto it = per_optimizer_.find(optimizer);
    return it == per_optimizer_.end() ? Stage::Ready : it->second.stage;
}

bool GradScaler::found_inf(const void *optimizer) const
{
    auto it = per_optimizer_.find(optimizer);
    return it != per_optimizer_.end() && it->second.found_inf.defined() && it->second.found_inf.item<float>() != 0.0f;
}

std::optional<GradScalerState> GradScaler::state() const
{
    if (!enabled_) return std::nullopt;
    GradScalerState s;
    s.scale = get_scale();
    s.growth_factor = growth_factor_;
    s.backoff_factor = backoff_factor_;
    s.growth_interval = growth_interval_;
    s.growth_tracker = get_growth_tracker();
    return s;
}

void GradScaler::load_state(const std::optional<GradScalerState> &state)
{
    if (!enabled_) return;
    if (!state)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "scaler state: the source state dict is empty, possibly because it was saved "
                                         "from a disabled GradScaler");
    init_scale_ = state->scale;
    if (scale_.defined()) scale_.fill_(state->scale);
    growth_factor_ = state->growth_factor;
    backoff_factor_ = state->backoff_factor;
    growth_interval_ = state->growth_interval;
    init_growth_tracker_ = state->growth_tracker;
    if (growth_tracker_.defined()) growth_tracker_.fill_(state->growth_tracker);
}

PyRef GradScaler::state_dict() const
{
    auto d = py_dict();
    if (auto s = state()) {
        py_set(*d, "scale", py_float(s->scale));
        py_set(*d, "growth_factor", py_float(s->growth_factor));
        py_set(*d, "backoff_factor", py_float(s->backoff_factor));
        py_set(*d, "growth_interval", py_int(s->growth_interval));
        py_set(*d, "_growth_tracker", py_int(s->growth_tracker));
        if (ds_) { // DeepSpeed's counters (Python's GradScaler.load_state_dict ignores extra keys)
            py_set(*d, "cur_iter", py_int(ds_iter_));
            py_set(*d, "last_overflow_iter", py_int(ds_last_overflow_iter_));
            py_set(*d, "cur_hysteresis", py_int(ds_hysteresis_));
        }
    }
    return d;
}

ApplyState GradScaler::load_state_dict(const PyObj &d, const std::string &what)
{
    if (!d.is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
    std::optional<GradScalerState> loaded;
    if (!d.map.empty()) {
        GradScalerState s;
        s.scale = sd_number(d, "scale", what);
        s.growth_factor = sd_number(d, "growth_factor", what);
        s.backoff_factor = sd_number(d, "backoff_factor", what);
        s.growth_interval = sd_int(d, "growth_interval", what);
        s.growth_tracker = sd_int(d, "_growth_tracker", what);
        loaded = s;
    }
    if (!loaded && enabled_) fail(ACCEL_ERR_DATA_LOSS, what + ": empty scaler state for an enabled gradient scaler");
    int64_t iter = 0, last = -1, hyst = ds_ ? ds_->hysteresis : 1;
    if (ds_ && d.get("cur_iter") != nullptr) {
        iter = sd_int(d, "cur_iter", what);
        last = sd_int(d, "last_overflow_iter", what);
        hyst = sd_int(d, "cur_hysteresis", what);
    }
    return [this, loaded, iter, last, hyst] {
        load_state(loaded);
        ds_iter_ = iter;
        ds_last_overflow_iter_ = last;
        ds_hysteresis_ = hyst;
    };
}

} // namespace accel
