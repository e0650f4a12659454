// accel_model_quantize (include/accel/model.h): Accelerate's load_and_quantize_model on a model in memory.
#include <accel/model.h>

#include "big_modeling/empty_init.hpp"
#include "c_api/guard.hpp"
#include "common/error.hpp"
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
        if (!config.weights_location.empty()) {
            accel::load_and_quantize_model(*m.impl, config);
            return;
        }
        // Accelerate's RuntimeError: an empty model has nothing to quantize without a checkpoint.
        const std::string meta = accel::big_modeling::first_meta_tensor(*m.impl);
        if (!meta.empty())
            accel::fail(ACCEL_ERR_FAILED_PRECONDITION,
                        "bnb_config_json: the model's \"" + meta + "\" is on the meta device (empty_init); give "
                        "\"weights_location\", the float checkpoint to load while quantizing");
        accel::quantize_model(*m.impl, config);
    });
}

} // extern "C"
