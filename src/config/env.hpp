// The only place that reads the environment: launcher topology and ACCELERATE_* defaults.
#pragma once

#include "config/accelerator_config.hpp"

#include <optional>
#include <string>

namespace accel::config {

std::optional<std::string> env_string(const char *name);
ProcessTopology topology_from_env();

} // namespace accel::config
