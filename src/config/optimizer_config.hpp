// Typed form of an optimizer's JSON config. Defaults are PyTorch's.
#pragma once

#include <string>
#include <vector>

namespace accel::config {

struct ParamGroupConfig;

struct OptimizerConfig {
    std::string type; // sgd, adam, adamw, adagrad, rmsprop, lomo, adalomo (dummy: DummyOptim)
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
    // lomo / adalomo (the lomo_optim package's Lomo and AdaLomo; src/optimizer/lomo.hpp). 0: no clipping
    // (Python's None). AdaLomo's eps is the pair (eps, eps2): eps under the squared gradient, eps2 the least
    // parameter RMS that scales its learning rate.
    double clip_grad_norm = 0.0, clip_grad_value = 0.0;
    double eps2 = 1e-3, clip_threshold = 1.0, decay_rate = -0.8, loss_scale = 1024.0;
    // "param_groups": PyTorch's parameter groups, in order (empty: one group of every parameter). Each group's
    // hyperparameters default to the top level's.
    std::vector<ParamGroupConfig> param_groups;
};

struct ParamGroupConfig {
    // Shell-style patterns (fnmatch, `*` crosses dots) over full parameter names; a parameter joins the first
    // group with a pattern that matches it. Empty: the group of every parameter no other group takes.
    std::vector<std::string> params;
    OptimizerConfig options; // hyperparameters only (type and param_groups unused)
};

OptimizerConfig parse_optimizer_config(const char *json);

// Which group each parameter joins (names in named_parameters() order): INVALID_ARGUMENT naming the
// parameter no group takes, or the group that takes none.
std::vector<size_t> assign_param_groups(const OptimizerConfig &config, const std::vector<std::string> &names);

} // namespace accel::config
