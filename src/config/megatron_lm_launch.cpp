#include "config/megatron_lm_launch.hpp"

#include "common/error.hpp"
#include "config/str_to_bool.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace accel::config {

namespace {

// Accelerate 0.24.1's launch.py "Megatron-LM Arguments", in its order.
const MegatronLaunchSetting kSettings[] = {
    {"megatron_lm_tp_degree", "MEGATRON_LM_TP_DEGREE", 'i'},
    {"megatron_lm_pp_degree", "MEGATRON_LM_PP_DEGREE", 'i'},
    {"megatron_lm_num_micro_batches", "MEGATRON_LM_NUM_MICRO_BATCHES", 'i'},
    {"megatron_lm_sequence_parallelism", "MEGATRON_LM_SEQUENCE_PARALLELISM", 'b'},
    {"megatron_lm_recompute_activations", "MEGATRON_LM_RECOMPUTE_ACTIVATIONS", 'b'},
    {"megatron_lm_use_distributed_optimizer", "MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER", 'b'},
    {"megatron_lm_gradient_clipping", "MEGATRON_LM_GRADIENT_CLIPPING", 'f'},
};

// Python's repr of a float: the shortest text that reads back to the same double, with ".0" when it would
// look like an integer (str(float("1")) == "1.0").
std::string python_float_text(double x)
{
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    char buf[40];
    for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, x);
        if (std::strtod(buf, nullptr) == x) break;
    }
    std::string s = buf;
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
}

} // namespace

const MegatronLaunchSetting *find_megatron_lm_setting(const std::string &name)
{
    const auto it = std::find_if(std::begin(kSettings), std::end(kSettings),
                                 [&](const MegatronLaunchSetting &s) { return name == s.name; });
    return it == std::end(kSettings) ? nullptr : &*it;
}

std::string megatron_lm_flag_text(const MegatronLaunchSetting &s, const std::string &value, const std::string &where)
{
    if (s.kind == 'b') {
        if (!str_to_bool(value))
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected true or false (Accelerate's str_to_bool words), got \"" +
                                                 value + "\"");
        return value;
    }
    errno = 0;
    char *end = nullptr;
    if (s.kind == 'i') { // argparse's int(): decimal digits only
        const long n = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0])) || *end != '\0' || errno != 0 ||
            n < 1 || n > 65536)
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected an integer in 1..65536, got \"" + value + "\"");
        return std::to_string(n);
    }
    const double x = std::strtod(value.c_str(), &end);
    const bool number = !value.empty() && *end == '\0' && errno == 0 && std::isfinite(x);
    if (!number || x < 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected a number >= 0 (0 disables clipping), got \"" + value + "\"");
    return python_float_text(x);
}

void megatron_lm_env_defaults(std::map<std::string, std::string> &env)
{
    env["ACCELERATE_USE_MEGATRON_LM"] = "true";
    env.emplace("MEGATRON_LM_TP_DEGREE", "1");
    env.emplace("MEGATRON_LM_PP_DEGREE", "1");
    env.emplace("MEGATRON_LM_GRADIENT_CLIPPING", "1.0");
}

} // namespace accel::config
