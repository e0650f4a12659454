#include "config/optimizer_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <fnmatch.h>

#include <cmath>
#include <limits>

namespace accel::config {

namespace {

// Lomo(model, lr, clip_grad_norm, clip_grad_value, weight_decay) and AdaLomo(model, lr, loss_scale, eps,
// clip_threshold, decay_rate, clip_grad_norm, clip_grad_value, weight_decay), as lomo_optim takes them.
void read_lomo_hyperparameters(JsonObject &o, OptimizerConfig &c)
{
    const double inf = INFINITY;
    // lomo_optim refuses clip_grad_norm <= 0 and ignores clip_grad_value <= 0: both must be positive here.
    c.clip_grad_norm = o.get_double("clip_grad_norm", 0.0, 0.0, inf, /*min_exclusive=*/true);
    c.clip_grad_value = o.get_double("clip_grad_value", 0.0, 0.0, inf, /*min_exclusive=*/true);
    if (c.type == "lomo") return;
    auto eps = o.get_double_array("eps", 0.0, inf);
    if (!eps.empty()) {
        if (eps.size() != 2)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("eps") + ": expected 2 numbers >= 0 (eps, eps2), got " +
                                                 std::to_string(eps.size()));
        c.eps = eps[0];
        c.eps2 = eps[1];
    }
    c.clip_threshold = o.get_double("clip_threshold", c.clip_threshold, 0.0, inf, /*min_exclusive=*/true);
    // beta2 of step t is 1 - t^decay_rate: a decay_rate >= 0 would weigh the new squares by 0 or less.
    c.decay_rate = o.get_double("decay_rate", c.decay_rate, -inf, 0.0, false, /*max_exclusive=*/true);
    // The loss is multiplied by it and each gradient divided (AdaLomo's default 2^10; 0 is Python's "off").
    c.loss_scale = o.get_double("loss_scale", c.loss_scale, 0.0, inf);
}

// The hyperparameters of c.type from `o`, defaulting to what `c` holds (PyTorch's defaults at the top level,
// the top level's values in a group).
void read_hyperparameters(JsonObject &o, OptimizerConfig &c, bool group)
{
    const double inf = INFINITY;
    c.lr = o.get_double("lr", c.lr, 0.0, inf);
    c.weight_decay = o.get_double("weight_decay", c.weight_decay, 0.0, inf);
    if (c.type == "sgd") {
        c.momentum = o.get_double("momentum", c.momentum, 0.0, inf);
        c.dampening = o.get_double("dampening", c.dampening, 0.0, inf);
        c.nesterov = o.get_bool("nesterov", c.nesterov);
        if (c.nesterov && (c.momentum <= 0.0 || c.dampening != 0.0))
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("nesterov") + ": requires momentum > 0 and dampening == 0");
    } else if (c.type == "adam" || c.type == "adamw") {
        auto betas = o.get_double_array("betas", 0.0, 0.999999999);
        if (!betas.empty()) {
            if (betas.size() != 2)
                fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("betas") + ": expected 2 numbers in [0, 1), got " +
                                                     std::to_string(betas.size()));
            c.beta1 = betas[0];
            c.beta2 = betas[1];
        }
        c.eps = o.get_double("eps", c.eps, 0.0, inf);
        c.amsgrad = o.get_bool("amsgrad", c.amsgrad);
    } else if (c.type == "adagrad") {
        c.lr_decay = o.get_double("lr_decay", c.lr_decay, 0.0, inf);
        // LibTorch's Adagrad fills every group's state from its defaults at construction (Python uses each
        // group's value): a per-group value would be ignored.
        if (group)
            o.require_absent("initial_accumulator_value",
                             "a group's own initial_accumulator_value (LibTorch's Adagrad takes the top level's for every group)");
        else // it fills float32 state tensors: a value past float's range cannot be stored (found by fuzzing)
            c.initial_accumulator_value = o.get_double("initial_accumulator_value", c.initial_accumulator_value, 0.0,
                                                       static_cast<double>(std::numeric_limits<float>::max()));
        c.eps = o.get_double("eps", c.eps, 0.0, inf);
    } else if (c.type == "lomo" || c.type == "adalomo") {
        read_lomo_hyperparameters(o, c);
    } else { // rmsprop
        c.alpha = o.get_double("alpha", c.alpha, 0.0, inf);
        c.eps = o.get_double("eps", c.eps, 0.0, inf);
        c.momentum = o.get_double("momentum", c.momentum, 0.0, inf);
        c.centered = o.get_bool("centered", c.centered);
    }
}

} // namespace

OptimizerConfig parse_optimizer_config(const char *json)
{
    JsonDocument doc(json, "config_json");
    JsonObject o(doc.root(), "");
    OptimizerConfig c;
    c.type = o.get_enum("type", "", {"sgd", "adam", "adamw", "adagrad", "rmsprop", "lomo", "adalomo", "dummy"});
    if (c.type.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "type: required (\"sgd\", \"adam\", \"adamw\", \"adagrad\", \"rmsprop\", "
                                         "\"lomo\", \"adalomo\" or \"dummy\")");
    if (c.type == "dummy") { // Accelerate's DummyOptim(params, lr=0.001, weight_decay=0)
        c.lr = o.get_double("lr", 1e-3, 0.0, INFINITY);
        c.weight_decay = o.get_double("weight_decay", 0.0, 0.0, INFINITY);
        o.finish();
        return c;
    }
    // PyTorch's defaults, where they differ from the struct's.
    if (c.type == "adagrad" || c.type == "rmsprop") c.lr = 1e-2;
    if (c.type == "adagrad") c.eps = 1e-10;
    if (c.type == "adamw") c.weight_decay = 1e-2;
    if (c.type == "adalomo") c.eps = 1e-30;
    read_hyperparameters(o, c, false);
    // lomo_optim's optimizers take the model, not parameter groups: one learning rate for every parameter.
    if (c.type == "lomo" || c.type == "adalomo")
        o.require_absent("param_groups", "not supported with " + c.type + " (it updates every parameter of the model "
                                         "with the learning rate passed to lomo_backward)");
    bool rest = false;
    for (JsonObject &g : o.get_object_array("param_groups")) {
        ParamGroupConfig group;
        group.options = c;
        group.params = g.get_string_array("params", {});
        if (g.has("params") && group.params.empty())
            fail(ACCEL_ERR_INVALID_ARGUMENT, g.path_of("params") + ": empty (leave it out for the group of the other parameters)");
        if (group.params.empty() && rest)
            fail(ACCEL_ERR_INVALID_ARGUMENT, g.path() + ": a second group without \"params\" (only one takes the other parameters)");
        rest = rest || group.params.empty();
        read_hyperparameters(g, group.options, true);
        g.finish();
        c.param_groups.push_back(std::move(group));
    }
    if (o.has("param_groups") && c.param_groups.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "param_groups: empty (leave it out for one group of every parameter)");
    o.finish();
    return c;
}

std::vector<size_t> assign_param_groups(const OptimizerConfig &c, const std::vector<std::string> &names)
{
    std::vector<size_t> out(names.size(), 0);
    if (c.param_groups.empty()) return out;
    const size_t none = c.param_groups.size();
    size_t rest = none;
    for (size_t g = 0; g < c.param_groups.size(); ++g)
        if (c.param_groups[g].params.empty()) rest = g;
    std::vector<size_t> count(c.param_groups.size(), 0);
    for (size_t i = 0; i < names.size(); ++i) {
        size_t group = none;
        for (size_t g = 0; g < c.param_groups.size() && group == none; ++g)
            for (const auto &pattern : c.param_groups[g].params)
                if (fnmatch(pattern.c_str(), names[i].c_str(), 0) == 0) {
                    group = g;
                    break;
                }
        if (group == none) group = rest;
        if (group == none)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "param_groups: parameter \"" + names[i] +
                                                 "\" is in no group (add a group without \"params\" for the others)");
        out[i] = group;
        ++count[group];
    }
    for (size_t g = 0; g < count.size(); ++g)
        if (count[g] == 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "param_groups[" + std::to_string(g) + "]" +
                                                 (c.param_groups[g].params.empty() ? "" : ".params") +
                                                 ": takes no trainable parameter of the model");
    return out;
}

} // namespace accel::config
