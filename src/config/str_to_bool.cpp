#include "config/str_to_bool.hpp"

#include "common/error.hpp"
#include "config/env.hpp"

#include <algorithm>
#include <cctype>

namespace accel::config {

std::optional<bool> str_to_bool(const std::string &text)
{
    std::string l = text;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    for (const char *w : {"y", "yes", "t", "true", "on", "1"})
        if (l == w) return true;
    for (const char *w : {"n", "no", "f", "false", "off", "0"})
        if (l == w) return false;
    return std::nullopt;
}

bool env_bool(const char *name, bool def)
{
    const std::optional<std::string> v = env_string(name);
    if (!v) return def;
    if (const std::optional<bool> b = str_to_bool(*v)) return *b;
    fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected true or false, got \"" +
                                         *v + "\"");
}

} // namespace accel::config
