// Running a prepared model's forward under the accelerator's mixed precision.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace accel {

class Model;
struct AcceleratorState;

// Forward through `model`. When `wrapped` and the model was prepared with mixed precision, the forward
// runs under the device's autocast (bf16 for "bf16" and "fp8", fp16 for "fp16" unless
// kwargs_handlers.autocast.enabled is false), with FP8 emulation for "fp8" (training mode, or eval with
// use_autocast_during_eval), and floating outputs come back as fp32 (Accelerate's convert_outputs_to_fp32).
at::Tensor forward(Model &model, const at::Tensor &input, bool wrapped);

// The dtype autocast uses for the accelerator's mixed precision (kFloat when it uses none).
at::ScalarType autocast_dtype(const AcceleratorState &state);

// Whether autocast to fp16 runs on `device` with this LibTorch (probed once per device type with a tiny
// linear under autocast). When it does not, `why` receives LibTorch's reason.
bool fp16_autocast_available(at::DeviceType device, std::string *why);

// One device type's autocast flags (CPU's for every type but CUDA), and setting both.
bool autocast_enabled(at::DeviceType device);
at::ScalarType autocast_dtype_of(at::DeviceType device);
void set_autocast(at::DeviceType device, bool enabled, at::ScalarType dtype);

// RAII scope of autocast for one device type, as torch.autocast's __enter__/__exit__. Autocast state is
// thread-local: the scope must end on the thread that began it.
class AutocastScope {
public:
    AutocastScope(at::DeviceType device, at::ScalarType dtype, bool cache_enabled, bool enabled = true);
    // CPU, as before.
    AutocastScope(at::ScalarType dtype, bool cache_enabled) : AutocastScope(at::kCPU, dtype, cache_enabled) {}
    ~AutocastScope();
    AutocastScope(const AutocastScope &) = delete;
    AutocastScope &operator=(const AutocastScope &) = delete;

private:
    at::DeviceType device_;
    bool prev_enabled_;
    at::ScalarType prev_dtype_;
    bool prev_cache_;
};

// Switches autocast off for every device type in a scope (ops inside run in their inputs' dtype).
class NoAutocastScope {
public:
    NoAutocastScope();
    ~NoAutocastScope();
    NoAutocastScope(const NoAutocastScope &) = delete;
    NoAutocastScope &operator=(const NoAutocastScope &) = delete;

private:
    bool prev_cpu_;
    bool prev_gpu_;
};

} // namespace accel
