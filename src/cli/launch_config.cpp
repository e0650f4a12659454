#include "cli/launch_config.hpp"

#include <cerrno>
#include <cstdlib>

namespace accel::cli {

namespace {

std::string trim(const std::string &s)
{
    size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n,");
    if (b == std::string::npos) return "";
    std::string t = s.substr(b, e - b + 1);
    if (t.size() >= 2 && (t.front() == '"' || t.front() == '\'') && t.back() == t.front()) t = t.substr(1, t.size() - 2);
    return t;
}

} // namespace

std::map<std::string, std::string> parse_launch_config(std::istream &in)
{
    std::map<std::string, std::string> out;
    std::string line;
    int depth = 0;
    while (std::getline(in, line)) {
        std::string t = trim(line);
        if (t.empty() || t[0] == '#') continue;
        if (t == "{" || t == "}") continue;
        size_t indent = line.find_first_not_of(" \t");
        bool json = t[0] == '"';
        if (!json && indent > 0) continue; // nested YAML
        if (json && depth > 0) {
            if (t.find('}') != std::string::npos) --depth;
            continue;
        }
        auto colon = t.find(':');
        if (colon == std::string::npos) continue;
        std::string key = trim(t.substr(0, colon)), value = trim(t.substr(colon + 1));
        if (json && value.rfind("{", 0) == 0 && value.find('}') == std::string::npos) {
            ++depth;
            continue;
        }
        out[key] = value;
    }
    return out;
}

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
