#include "config/optimizer_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cmath>
#include <limits>

namespace accel::config {

OptimizerConfig parse_optimizer_config(const char *json)
{
    JsonDocument doc(json, "config_json");
    JsonObject o(doc.root(), "");
    OptimizerConfig c;
    c.type = o.get_enum("type", "", {"sgd", "adam", "adamw", "adagrad", "rmsprop"});
    if (c.type.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "type: required (\"sgd\", \"adam\", \"adamw\", \"adagrad\" or \"rmsprop\")");
    const double inf = INFINITY;
    double default_lr = c.type == "sgd" ? 1e-3 : c.type == "adagrad" || c.type == "rmsprop" ? 1e-2 : 1e-3;
    c.lr = o.get_double("lr", default_lr, 0.0, inf);
    c.weight_decay = o.get_double("weight_decay", c.type == "adamw" ? 1e-2 : 0.0, 0.0, inf);
    if (c.type == "sgd") {
        c.momentum = o.get_double("momentum", 0.0, 0.0, inf);
        c.dampening = o.get_double("dampening", 0.0, 0.0, inf);
        c.nesterov = o.get_bool("nesterov", false);
        if (c.nesterov && (c.momentum <= 0.0 || c.dampening != 0.0))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "nesterov: requires momentum > 0 and dampening == 0");
    } else if (c.type == "adam" || c.type == "adamw") {
        auto betas = o.get_double_array("betas", 0.0, 0.999999999);
        if (!betas.empty()) {
            if (betas.size() != 2)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "betas: expected 2 numbers in [0, 1), got " + std::to_string(betas.size()));
            c.beta1 = betas[0];
            c.beta2 = betas[1];
        }
        c.eps = o.get_double("eps", 1e-8, 0.0, inf);
        c.amsgrad = o.get_bool("amsgrad", false);
    } else if (c.type == "adagrad") {
        c.lr_decay = o.get_double("lr_decay", 0.0, 0.0, inf);
        // It fills float32 state tensors: a value past float's range cannot be stored (found by fuzzing).
        c.initial_accumulator_value =
            o.get_double("initial_accumulator_value", 0.0, 0.0, static_cast<double>(std::numeric_limits<float>::max()));
        c.eps = o.get_double("eps", 1e-10, 0.0, inf);
    } else { // rmsprop
        c.alpha = o.get_double("alpha", 0.99, 0.0, inf);
        c.eps = o.get_double("eps", 1e-8, 0.0, inf);
        c.momentum = o.get_double("momentum", 0.0, 0.0, inf);
        c.centered = o.get_bool("centered", false);
    }
    o.finish();
    return c;
}

} // namespace accel::config
