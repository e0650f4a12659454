#include "cli/launch_config.hpp"

#include <cerrno>
#include <cstdlib>

namespace accel::cli {

std::optional<int> parse_int_in(const std::string &text, int min, int max)
{
    if (text.empty()) return std::nullopt;
    char *end = nullptr;
    errno = 0;
    const long x = std::strtol(text.c_str(), &end, 10);
    if (errno != 0 || end != text.c_str() + text.size() || x < min || x > max) return std::nullopt;
    return static_cast<int>(x);
}

} // namespace accel::cli
