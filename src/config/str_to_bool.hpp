// Accelerate's str_to_bool (utils/environment.py), which its launcher and library read every boolean switch with:
// y, yes, t, true, on, 1 / n, no, f, false, off, 0, in any case. One reader for the config file's words, the
// ACCELERATE_* / MEGATRON_LM_* variables and the launcher's flags, so they agree on what a boolean is.
#pragma once

#include <optional>
#include <string>

namespace accel::config {

// nullopt for any other text.
std::optional<bool> str_to_bool(const std::string &text);
// The variable `name` read with str_to_bool: `def` when unset or empty, ACCEL_ERR_INVALID_ARGUMENT naming the
// variable for another value.
bool env_bool(const char *name, bool def);

} // namespace accel::config
