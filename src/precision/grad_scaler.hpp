// GradScaler: PyTorch's dynamic loss scaler (torch/amp/grad_scaler.py), step for step; with a
// DeepSpeedLossScale in its kwargs (deepspeed_plugin + fp16), DeepSpeed's update rule instead.
//
// scale() multiplies the loss by the current scale; unscale_() divides an optimizer's gradients by it
// (inv_scale computed in float64, then cast to float32) and records whether any is inf/NaN; step()
// runs the optimizer step unless non-finite values were found; update() backs the scale off after an
// overflow and grows it after `growth_interval` clean steps. Used for mixed_precision "fp16".
#pragma once

#include "config/accelerator_config.hpp"
#include "state/state_dict.hpp"

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace accel {

// GradScaler.state_dict(): the five entries of scaler.pt (see checkpoint-format.md §7).
struct GradScalerState {
    double scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
    int64_t growth_tracker = 0; // "_growth_tracker"
};

class GradScaler {
public:
    // READY -> (unscale_) UNSCALED -> (step) STEPPED -> (update) READY, per optimizer.
    enum class Stage { Ready, Unscaled, Stepped };

    explicit GradScaler(const config::GradScalerKwargs &kwargs);

    bool is_enabled() const { return enabled_; }

    // outputs * scale (float32). The scale tensor is created on the first call, on the outputs' device.
    at::Tensor scale(const at::Tensor &outputs);

    // Divides the gradients of `params` in place by the scale and records found_inf for `optimizer`.
    // Fails (FAILED_PRECONDITION) if unscale_ or step already ran for it since the last update().
    void unscale_(const void *optimizer, const std::vector<at::Tensor> &params);

    // Unscales if not done yet, then calls `optimizer_step` unless inf/NaN was found. Returns whether
    // the optimizer stepped. A disabled scaler just steps.
    bool step(const void *optimizer, const std::vector<at::Tensor> &params, const std::function<void()> &optimizer_step);

    // Back off (found inf/NaN) or count towards growth; then every optimizer is READY again.
    void update();
    // update(new_scale): sets the scale directly (PyTorch's scaler.update(new_scale)).
    void update(double new_scale);

    // The current scale (init_scale before the first scale(); 1.0 when disabled), as get_scale().
    double get_scale() const;
    int64_t get_growth_tracker() const;
    Stage stage(const void *optimizer) const;
    // Whether unscale_ found inf/NaN for `optimizer` since the last update (false when not unscaled).
    bool found_inf(const void *optimizer) const;

    // std::nullopt for a disabled scaler (PyTorch returns {}).
    std::optional<GradScalerState> state() const;
    // An empty state (nullopt) is an error, as in PyTorch; a disabled scaler ignores the call.
    void load_state(const std::optional<GradScalerState> &state);
    // The same as Python's dict (scaler.pt): {} when disabled, else the five entries.
    PyRef state_dict() const;
    // Checks a scaler.pt dict (DATA_LOSS naming `what`; an empty dict for an enabled scaler is DATA_LOSS
    // too) and returns the function that loads it.
    ApplyState load_state_dict(const PyObj &state_dict, const std::string &what);

    // How found_inf is combined across ranks. With one process the local flag is the global one. A
    // distributed backend installs an all-reduce (MAX) here; with DDP gradients are already all-reduced
    // so every rank sees the same values, but sharded training (FSDP/ZeRO) needs it.
    using FoundInfReducer = std::function<void(at::Tensor &found_inf)>;
    void set_found_inf_reducer(FoundInfReducer reducer) { reducer_ = std::move(reducer); }

private:
    struct OptimizerState {
        Stage stage = Stage::Ready;
        at::Tensor found_inf; // float32 scalar; undefined until unscale_
    };
    void check_scale_initialised(const char *funcname) const;
    // The single place where found_inf leaves this process (see FoundInfReducer).
    void reduce_found_inf_across_ranks(at::Tensor &found_inf) const;

    // update() under DeepSpeed's rule (config::DeepSpeedLossScale): overflow with hysteresis left -> one
    // less; else halve (floor min_loss_scale; an overflow at the floor is an error, as DeepSpeed stops);
    // clean: double when (iter - last_overflow_iter) % window == 0. Static scale: never changes, never skips.
    void update_deepspeed(bool overflow, float &scale);
    std::optional<config::DeepSpeedLossScale> ds_;
    int64_t ds_iter_ = 0, ds_last_overflow_iter_ = -1, ds_hysteresis_ = 1;

    bool enabled_;
    double init_scale_;
    double growth_factor_;
    double backoff_factor_;
    int64_t growth_interval_;
    int64_t init_growth_tracker_ = 0;
    at::Tensor scale_;          // float32 scalar, lazily created
    at::Tensor growth_tracker_; // int32 scalar, lazily created
    std::map<const void *, OptimizerState> per_optimizer_;
    FoundInfReducer reducer_;
};

} // namespace accel
