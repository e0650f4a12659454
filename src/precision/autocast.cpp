#include "precision/autocast.hpp"

#include "model/model.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/autocast_mode.h>

namespace accel {

AutocastScope::AutocastScope(at::ScalarType dtype, bool cache_enabled)
    : prev_enabled_(at::autocast::is_cpu_enabled()),
      prev_dtype_(at::autocast::get_autocast_cpu_dtype()),
      prev_cache_(at::autocast::is_autocast_cache_enabled())
{
    // The dtype must be set before autocast is switched on.
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_autocast_cache_enabled(cache_enabled);
    at::autocast::set_cpu_enabled(true);
    at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope()
{
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(prev_enabled_);
    at::autocast::set_autocast_cpu_dtype(prev_dtype_);
    at::autocast::set_autocast_cache_enabled(prev_cache_);
}

at::Tensor forward(Model &model, const at::Tensor &input, bool wrapped)
{
    const AcceleratorState *s = model.prepared_by.get();
    if (!wrapped || s == nullptr || s->config.mixed_precision != ACCEL_MIXED_PRECISION_BF16 ||
        !s->config.autocast.enabled)
        return model.forward(input);
    at::Tensor out;
    {
        AutocastScope scope(at::kBFloat16, s->config.autocast.cache_enabled);
        out = model.forward(input);
    }
    return out.is_floating_point() && out.scalar_type() != at::kFloat && out.scalar_type() != at::kDouble
               ? out.to(at::kFloat)
               : out;
}

} // namespace accel
