// Small parsing helpers of `accel launch`, kept apart from launch.cpp (which starts processes) so that
// tests/fuzz can run them alone. The config file itself is read by src/config/config_file.hpp's
// parse_cluster_config (yaml-cpp), which works on a buffer.
#pragma once

#include <optional>
#include <string>

namespace accel::cli {

// A decimal integer in [min, max] with nothing around it; nullopt otherwise.
std::optional<int> parse_int_in(const std::string &text, int min, int max);

} // namespace accel::cli
