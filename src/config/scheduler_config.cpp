#include "config/scheduler_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cmath>

namespace accel::config {

SchedulerConfig parse_scheduler_config(const char *json)
{
    JsonDocument doc(json, "config_json");
    JsonObject o(doc.root(), "");
    SchedulerConfig c;
    c.type = o.get_enum("type", "", {"constant", "linear", "cosine", "step", "exponential", "polynomial", "dummy"});
    if (c.type.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "type: required (\"constant\", \"linear\", \"cosine\", \"step\", \"exponential\", "
                                         "\"polynomial\" or \"dummy\")");
    if (c.type == "dummy") { // Accelerate's DummyScheduler(optimizer, total_num_steps=None, warmup_num_steps=0)
        c.num_training_steps = o.get_optional_int("total_num_steps", 1, INT64_MAX).value_or(-1);
        c.num_warmup_steps = o.get_int("warmup_num_steps", 0, 0, INT64_MAX);
        o.finish();
        return c;
    }
    const bool warmup_shape = c.type == "constant" || c.type == "linear" || c.type == "cosine" || c.type == "polynomial";
    if (warmup_shape) c.num_warmup_steps = o.get_int("num_warmup_steps", 0, 0, INT64_MAX);
    if (c.type == "linear" || c.type == "cosine" || c.type == "polynomial") {
        if (!o.has("num_training_steps"))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "num_training_steps: required for a " + c.type + " schedule");
        c.num_training_steps = o.get_int("num_training_steps", 0, 1, INT64_MAX);
        if (c.num_warmup_steps > c.num_training_steps)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "num_warmup_steps: expected at most num_training_steps (" +
                                                 std::to_string(c.num_training_steps) + "), got " +
                                                 std::to_string(c.num_warmup_steps));
    }
    if (c.type == "cosine") c.num_cycles = o.get_double("num_cycles", 0.5, 0.0, INFINITY, true);
    if (c.type == "step") {
        if (!o.has("step_size")) fail(ACCEL_ERR_INVALID_ARGUMENT, "step_size: required for a step schedule");
        c.step_size = o.get_int("step_size", 1, 1, INT64_MAX);
        c.gamma = o.get_double("gamma", 0.1, 0.0, INFINITY, true);
    }
    if (c.type == "exponential") {
        if (!o.has("gamma")) fail(ACCEL_ERR_INVALID_ARGUMENT, "gamma: required for an exponential schedule");
        c.gamma = o.get_double("gamma", 0.1, 0.0, INFINITY, true);
    }
    if (c.type == "polynomial") {
        c.lr_end = o.get_double("lr_end", 1e-7, 0.0, INFINITY);
        c.power = o.get_double("power", 1.0, 0.0, INFINITY, true);
    }
    o.finish();
    return c;
}

} // namespace accel::config
