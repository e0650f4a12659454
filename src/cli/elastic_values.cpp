#include "cli/elastic_values.hpp"

#include "cli/launch_config.hpp"
#include "common/error.hpp"

namespace accel::cli {

std::string store_text(const std::string &value)
{
    constexpr size_t kMax = 300;
    std::string out;
    for (size_t i = 0; i < value.size() && i < kMax; ++i) {
        const unsigned char c = static_cast<unsigned char>(value[i]);
        out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
    }
    if (value.size() > kMax) out += "...";
    return out;
}

int store_int(const std::string &key, const std::string &value, int min, int max)
{
    const std::optional<int> x = parse_int_in(value, min, max);
    if (!x)
        fail(ACCEL_ERR_DATA_LOSS, "the launchers' store holds \"" + store_text(value) + "\" under " + key +
                                      ", expected an integer in " + std::to_string(min) + ".." + std::to_string(max) +
                                      " (a launcher of another job or version, or a stranger, wrote it)");
    return *x;
}

} // namespace accel::cli
