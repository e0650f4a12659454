#include "config/loss_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

namespace accel::config {

LossConfig parse_loss_config(const char *json)
{
    JsonDocument doc(json, "loss_name");
    JsonObject o(doc.root(), "loss_name");
    LossConfig c;
    c.type = o.get_enum("type", "", {"cross_entropy", "nll", "mse", "l1", "smooth_l1", "bce_with_logits", "causal_lm"});
    if (c.type.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("type") + ": required");
    if (c.type == "cross_entropy" || c.type == "nll" || c.type == "causal_lm")
        c.ignore_index = o.get_optional_int("ignore_index", INT64_MIN, INT64_MAX);
    o.finish();
    return c;
}

} // namespace accel::config
