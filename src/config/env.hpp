// The only place that reads the environment: launcher topology and ACCELERATE_* defaults.
#pragma once

#include "config/accelerator_config.hpp"

#include <optional>
#include <string>

namespace accel::config {

std::optional<std::string> env_string(const char *name);
ProcessTopology topology_from_env();

// LibTorch's own log level variable, TORCH_CPP_LOG_LEVEL: INFO, WARNING, ERROR or FATAL (any case) or 0-3, as
// glog's severities; nullopt when unset. Another value is ACCEL_ERR_INVALID_ARGUMENT naming it.
std::optional<int> torch_log_level_from_env();
// Whether GLOG_minloglevel is set (glog applied it when it loaded; accel then leaves glog's level alone).
bool glog_level_in_env();

} // namespace accel::config
