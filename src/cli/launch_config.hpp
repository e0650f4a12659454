// The accelerate config file that `accel launch --config_file` reads, as text: kept apart from launch.cpp
// (which starts processes) so that tests/fuzz can run the parser on its own.
#pragma once

#include <istream>
#include <map>
#include <optional>
#include <string>

namespace accel::cli {

// Top-level scalar keys of an accelerate config file: YAML `key: value` or JSON `"key": value,`, one per
// line, as `accelerate config` writes them. Nested sections (fsdp_config, ...) are not read.
std::map<std::string, std::string> parse_launch_config(std::istream &in);

// A decimal integer in [min, max] with nothing around it; nullopt otherwise.
std::optional<int> parse_int_in(const std::string &text, int min, int max);

} // namespace accel::cli
