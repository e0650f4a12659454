// accel's logger (Accelerate's get_logger / MultiProcessAdapter): one process-wide threshold (ACCELERATE_LOG_LEVEL or
// accel_log_set_level) and one sink (standard error, or the caller's callback), used by the C API's accel_log_write
// and by the library's own warnings. Plain C++ without LibTorch: the process facts come from the environment or the
// caller, so any layer may log.
#pragma once

#include <accel/log.h>

#include <cstdint>
#include <optional>
#include <string>

namespace accel::logging {

// ACCELERATE_LOG_LEVEL's spelling of a level: DEBUG, INFO, WARNING (WARN), ERROR, CRITICAL (FATAL), NOTSET in any
// case, or a number 0-50; nullopt for anything else.
std::optional<int32_t> parse_level(const std::string &text);

// The threshold: set_level's, else ACCELERATE_LOG_LEVEL's (read once), else WARNING. An unreadable variable is
// said once on standard error and counts as unset; `env_error` (when given) receives its message.
int32_t level(std::string *env_error = nullptr);
void set_level(int32_t level); // 0-50, checked by the caller
bool enabled_for(int32_t level);

void set_sink(accel_log_fn_t fn, void *user_data);

// Hands one message that passed the filters to the sink. `num_processes` > 1 adds the default sink's "[rank<i>] ".
void emit(int32_t level, const std::string &name, int32_t process_index, int32_t num_processes,
          const std::string &message);

// The library's own messages (logger "accel"), dropped below the threshold. `log` keeps to the main process unless
// `main_process_only` is false, with the environment's process facts (RANK, WORLD_SIZE, ...); `log_as` is for a
// caller that knows its process (an accelerator: its rank may come from init_process_group, not the environment)
// and has chosen already that this process speaks.
void log(int32_t level, const std::string &message, bool main_process_only = true);
void log_as(int32_t level, int32_t process_index, int32_t num_processes, const std::string &message);
inline void warning(const std::string &message) { log(ACCEL_LOG_WARNING, message); }

// printf into a std::string, for messages built from numbers.
std::string printf_string(const char *format, ...) __attribute__((format(printf, 1, 2)));

} // namespace accel::logging
