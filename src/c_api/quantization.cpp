// accel_model_quantize (include/accel/model.h): Accelerate's load_and_quantize_model on a model in memory.
#include <accel/model.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "config/bnb_quantization_config.hpp"
#include "quantization/quantize_model.hpp"

using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_model_quantize(accel_model_t *model, const char *bnb_config_json) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        const auto config = accel::config::parse_bnb_quantization_config(checked_string(bnb_config_json, "bnb_config_json"),
                                                                         "bnb_config_json");
        accel::quantize_model(*m.impl, config);
    });
}

} // extern "C"
