// Running a prepared model's forward under the accelerator's mixed precision.
#pragma once

#include <ATen/ATen.h>

namespace accel {

class Model;

// Forward through `model`; when `wrapped` and the model was prepared with bf16, the forward runs under
// CPU autocast and floating outputs come back as fp32 (Accelerate's convert_outputs_to_fp32).
at::Tensor forward(Model &model, const at::Tensor &input, bool wrapped);

// RAII scope of autocast for the device (CPU here), as torch.autocast's __enter__/__exit__.
class AutocastScope {
public:
    AutocastScope(at::ScalarType dtype, bool cache_enabled);
    ~AutocastScope();
    AutocastScope(const AutocastScope &) = delete;
    AutocastScope &operator=(const AutocastScope &) = delete;

private:
    bool prev_enabled_;
    at::ScalarType prev_dtype_;
    bool prev_cache_;
};

} // namespace accel
