#include "precision/autocast.hpp"

#include "common/error.hpp"
#include "model/model.hpp"
#include "precision/fp8.hpp"
#include "state/accelerator_state.hpp"
#include "state/device.hpp"
#include "profiling/ranges.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/autocast_mode.h>

#include <map>
#include <mutex>
#include <optional>

namespace accel {

namespace {

void set_device_enabled(at::DeviceType d, bool on)
{
    if (d == at::kCUDA) at::autocast::set_enabled(on);
    else at::autocast::set_cpu_enabled(on);
}

void set_device_dtype(at::DeviceType d, at::ScalarType t)
{
    if (d == at::kCUDA) at::autocast::set_autocast_gpu_dtype(t);
    else at::autocast::set_autocast_cpu_dtype(t);
}

// Autocast exists for CPU and CUDA in LibTorch 1.13; anything else runs under the CPU flags.
at::DeviceType autocast_device(at::DeviceType d) { return d == at::kCUDA ? at::kCUDA : at::kCPU; }

at::DeviceType device_of(const Model &model)
{
    for (const auto &p : model.named_parameters()) return autocast_device(p.second.device().type());
    return at::kCPU;
}

} // namespace

bool autocast_enabled(at::DeviceType d) { return d == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }

at::ScalarType autocast_dtype_of(at::DeviceType d)
{
    return d == at::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}

void set_autocast(at::DeviceType d, bool enabled, at::ScalarType dtype)
{
    set_device_dtype(d, dtype); // first: CPU autocast checks it when switched on
    set_device_enabled(d, enabled);
}

AutocastScope::AutocastScope(at::DeviceType device, at::ScalarType dtype, bool cache_enabled, bool enabled)
    : device_(autocast_device(device)),
      prev_enabled_(autocast_enabled(device_)),
      prev_dtype_(autocast_dtype_of(device_)),
      prev_cache_(at::autocast::is_autocast_cache_enabled())
{
    // The dtype must be set before autocast is switched on. A disabled scope (autocast(enabled=False))
    // leaves it alone: LibTorch's CPU autocast rejects fp16, which "fp16" with autocast disabled asks for.
    if (enabled) set_device_dtype(device_, dtype);
    at::autocast::set_autocast_cache_enabled(cache_enabled);
    set_device_enabled(device_, enabled);
    at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope()
{
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_device_enabled(device_, prev_enabled_);
    set_device_dtype(device_, prev_dtype_);
    at::autocast::set_autocast_cache_enabled(prev_cache_);
}

NoAutocastScope::NoAutocastScope() : prev_cpu_(at::autocast::is_cpu_enabled()), prev_gpu_(at::autocast::is_enabled())
{
    at::autocast::set_cpu_enabled(false);
    at::autocast::set_enabled(false);
}

NoAutocastScope::~NoAutocastScope()
{
    at::autocast::set_cpu_enabled(prev_cpu_);
    at::autocast::set_enabled(prev_gpu_);
}

at::ScalarType autocast_dtype(const AcceleratorState &state)
{
    switch (state.config.mixed_precision) {
    case ACCEL_MIXED_PRECISION_BF16:
    case ACCEL_MIXED_PRECISION_FP8: return at::kBFloat16; // Accelerate: fp8 also runs bf16 autocast
    case ACCEL_MIXED_PRECISION_FP16: return at::kHalf;
    default: return at::kFloat;
    }
}

bool fp16_autocast_available(at::DeviceType device, std::string *why)
{
    static std::mutex mu;
    static std::map<at::DeviceType, std::pair<bool, std::string>> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(device);
    if (it == cache.end()) {
        std::pair<bool, std::string> result{true, ""};
        try {
            at::NoGradGuard no_grad;
            // First the kernel itself (a Half addmm), then autocast's cast of a linear layer to fp16.
            at::Tensor h = at::ones({2, 2}, at::TensorOptions().device(device).dtype(at::kHalf));
            (void)at::addmm(h, h, h);
            AutocastScope scope(device, at::kHalf, false);
            at::Tensor x = at::ones({2, 2}, at::TensorOptions().device(device).dtype(at::kFloat));
            at::Tensor y = at::linear(x, x, x[0]);
            if (y.scalar_type() != at::kHalf) result = {false, "autocast left a linear layer in " + std::string(c10::toString(y.scalar_type()))};
        } catch (const c10::Error &e) {
            std::string msg = e.what_without_backtrace();
            result = {false, msg.substr(0, msg.find('\n'))};
        }
        it = cache.emplace(device, std::move(result)).first;
    }
    if (why != nullptr) *why = it->second.second;
    return it->second.first;
}

namespace {
at::Tensor forward_unhooked(Model &model, const at::Tensor &input, bool wrapped)
{
    const AcceleratorState *s = model.prepared_by.get();
    if (!wrapped || s == nullptr) return model.forward(input);
    const auto mp = s->config.mixed_precision;
    const bool use_autocast = mp != ACCEL_MIXED_PRECISION_NO && s->config.autocast.enabled;
    const bool use_fp8 = mp == ACCEL_MIXED_PRECISION_FP8 &&
                         (model.is_training() || s->config.fp8_recipe.use_autocast_during_eval);
    if (!use_autocast && !use_fp8) return model.forward(input);
    at::Tensor out;
    {
        std::optional<AutocastScope> scope;
        if (use_autocast) scope.emplace(device_of(model), autocast_dtype(*s), s->config.autocast.cache_enabled);
        fp8::Fp8Scope fp8_scope(use_fp8);
        out = model.forward(input);
    }
    return out.is_floating_point() && out.scalar_type() != at::kFloat && out.scalar_type() != at::kDouble
               ? out.to(at::kFloat)
               : out;
}

} // namespace

// A sharded model gathers its parameters around the forward, wrapped or not (they exist nowhere else).
// Inputs from the host (a caller's buffer, an unprepared loader) go to the model's device first.
at::Tensor forward(Model &model, const at::Tensor &input, bool wrapped)
{
    profiling::Range range(profiling::kForward);
    if (!model.forward_hooks) model.check_materialized("forward"); // hooks (sharding, dispatch) place the weights
    const at::Tensor placed = send_to_device(input, model.device());
    std::shared_ptr<ForwardHooks> hooks = model.forward_hooks;
    if (!hooks) return forward_unhooked(model, placed, wrapped);
    const at::Tensor in = hooks->before_forward(placed);
    return hooks->after_forward(forward_unhooked(model, in, wrapped));
}

} // namespace accel
