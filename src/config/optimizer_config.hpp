// Typed form of an optimizer's JSON config. Defaults are PyTorch's.
#pragma once

#include <string>

namespace accel::config {

struct OptimizerConfig {
    std::string type; // sgd, adam, adamw, adagrad, rmsprop
    double lr = 1e-3;
    double momentum = 0.0, dampening = 0.0;
    bool nesterov = false;
    double weight_decay = 0.0;
    double beta1 = 0.9, beta2 = 0.999;
    double eps = 1e-8;
    bool amsgrad = false;
    double lr_decay = 0.0, initial_accumulator_value = 0.0;
    double alpha = 0.99;
    bool centered = false;
};

OptimizerConfig parse_optimizer_config(const char *json);

} // namespace accel::config
