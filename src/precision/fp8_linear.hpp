// FP8 as an implementation of the linear seam (model/linear.hpp): a decorator over another Linear that,
// inside an enabled fp8 scope (fp8::Fp8Scope, as TransformerEngine's fp8_autocast), computes through the
// FP8 emulation with this layer's delayed-scaling state, and outside it computes as the layer it wraps.
#pragma once

#include "config/accelerator_config.hpp"
#include "model/linear.hpp"

#include <memory>

namespace accel::fp8 {

std::shared_ptr<Linear> make_fp8_linear(std::shared_ptr<Linear> inner, const config::FP8RecipeKwargs &recipe);

} // namespace accel::fp8
