// `accelerate launch`'s Megatron-LM settings: the flags --megatron_lm_* (also the keys of a config file's
// megatron_lm_config section, which `accelerate config` writes with the same names) and the variables
// MEGATRON_LM_* its launcher exports with ACCELERATE_USE_MEGATRON_LM=true (Accelerate 0.24.1's utils/launch.py).
// The library reads them (config/megatron_lm_plugin.cpp); here they are only checked and spelled as the
// launcher spells them. No LibTorch: `accel launch` and the config-file fuzz target use it.
#pragma once

#include <map>
#include <string>

namespace accel::config {

struct MegatronLaunchSetting {
    const char *name; // flag without "--" and megatron_lm_config key: "megatron_lm_pp_degree"
    const char *env;  // MEGATRON_LM_PP_DEGREE
    char kind;        // 'i' a count (argparse int), 'f' a number (argparse float), 'b' a true/false text (argparse str)
};

// The setting named `name` (a flag without its dashes, or a megatron_lm_config key); nullptr when none.
const MegatronLaunchSetting *find_megatron_lm_setting(const std::string &name);

// A flag's value as the launcher exports it: an int as Python's str(int(v)), a float as str(float(v)) ("1" ->
// "1.0"), a true/false text as given (str(v)). INVALID_ARGUMENT naming `where` for a value the library would
// refuse later anyway (a count below 1, not a number, not one of Accelerate's str_to_bool words).
std::string megatron_lm_flag_text(const MegatronLaunchSetting &s, const std::string &value, const std::string &where);

// ACCELERATE_USE_MEGATRON_LM=true and the launcher's defaults for what `env` lacks: MEGATRON_LM_TP_DEGREE=1,
// MEGATRON_LM_PP_DEGREE=1 and MEGATRON_LM_GRADIENT_CLIPPING=1.0 (always exported by Accelerate; the other
// variables only when given).
void megatron_lm_env_defaults(std::map<std::string, std::string> &env);

} // namespace accel::config
