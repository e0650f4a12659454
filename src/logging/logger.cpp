#include "logging/logger.hpp"

#include "config/env.hpp"

#include <atomic>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace accel::logging {

namespace {

struct Sink {
    accel_log_fn_t fn = nullptr; // nullptr: standard error
    void *user_data = nullptr;
};

// The sink is replaced whole and read as a snapshot, so a message is never sent to half of a new sink, and no
// lock is held while the callback runs (a Python or JVM callback may take its own locks and log again).
std::mutex sink_mutex;
std::shared_ptr<const Sink> current_sink = std::make_shared<Sink>();

std::atomic<int32_t> explicit_level{-1}; // -1: none set

struct EnvLevel {
    int32_t level = ACCEL_LOG_WARNING;
    std::string error; // why ACCELERATE_LOG_LEVEL was not used, "" if it was (or is unset)
};

const EnvLevel &env_level()
{
    static const EnvLevel value = [] {
        EnvLevel e;
        const auto text = config::env_string("ACCELERATE_LOG_LEVEL");
        if (!text) return e;
        if (const auto parsed = parse_level(*text)) {
            e.level = *parsed;
            return e;
        }
        e.error = "environment variable ACCELERATE_LOG_LEVEL: expected DEBUG, INFO, WARNING, ERROR or CRITICAL (or a "
                  "number 0-50), got \"" + *text + "\"";
        // Said here once, not at each message: the library's own warnings must not fail or repeat because of it.
        std::fprintf(stderr, "accel: warning: %s; using WARNING\n", e.error.c_str());
        return e;
    }();
    return value;
}

std::string level_name(int32_t level)
{
    switch (level) {
    case ACCEL_LOG_DEBUG: return "debug";
    case ACCEL_LOG_INFO: return "info";
    case ACCEL_LOG_WARNING: return "warning";
    case ACCEL_LOG_ERROR: return "error";
    case ACCEL_LOG_CRITICAL: return "critical";
    default: return "level " + std::to_string(level);
    }
}

void write_stderr(int32_t level, const std::string &name, int32_t process_index, int32_t num_processes,
                  const std::string &message)
{
    std::string line = num_processes > 1 ? "[rank" + std::to_string(process_index) + "] " : "";
    line += name + ": " + level_name(level) + ": " + message + "\n";
    // One write, so lines of several threads (or of ranks sharing a terminal) do not interleave mid-line.
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}

} // namespace

std::optional<int32_t> parse_level(const std::string &text)
{
    std::string u;
    for (char ch : text) u += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    static const std::pair<const char *, int32_t> names[] = {
        {"NOTSET", ACCEL_LOG_NOTSET}, {"DEBUG", ACCEL_LOG_DEBUG},     {"INFO", ACCEL_LOG_INFO},
        {"WARNING", ACCEL_LOG_WARNING}, {"WARN", ACCEL_LOG_WARNING}, {"ERROR", ACCEL_LOG_ERROR},
        {"CRITICAL", ACCEL_LOG_CRITICAL}, {"FATAL", ACCEL_LOG_CRITICAL}};
    for (const auto &[n, v] : names)
        if (u == n) return v;
    if (u.empty() || u.size() > 2) return std::nullopt;
    for (char ch : u)
        if (!std::isdigit(static_cast<unsigned char>(ch))) return std::nullopt;
    const int32_t v = std::atoi(u.c_str());
    return v <= ACCEL_LOG_CRITICAL ? std::optional<int32_t>(v) : std::nullopt;
}

int32_t level(std::string *env_error)
{
    const int32_t set = explicit_level.load();
    const EnvLevel &env = env_level();
    if (env_error) *env_error = set >= 0 ? std::string() : env.error;
    return set >= 0 ? set : env.level;
}

void set_level(int32_t level) { explicit_level.store(level); }

bool enabled_for(int32_t message_level) { return message_level >= level(); }

void set_sink(accel_log_fn_t fn, void *user_data)
{
    auto next = std::make_shared<Sink>(Sink{fn, user_data});
    std::lock_guard<std::mutex> lock(sink_mutex);
    current_sink = std::move(next);
}

void emit(int32_t level, const std::string &name, int32_t process_index, int32_t num_processes,
          const std::string &message)
{
    std::shared_ptr<const Sink> sink;
    {
        std::lock_guard<std::mutex> lock(sink_mutex);
        sink = current_sink;
    }
    if (sink->fn) {
        try {
            sink->fn(sink->user_data, level, name.c_str(), process_index, message.c_str());
            return;
        } catch (...) {
            // A C++ callback that throws: the message still reaches standard error rather than being lost.
        }
    }
    write_stderr(level, name, process_index, num_processes, message);
}

void log(int32_t message_level, const std::string &message, bool main_process_only)
{
    if (!enabled_for(message_level)) return;
    int32_t rank = 0, world = 1;
    try {
        const auto t = config::topology_from_env();
        rank = t.rank;
        world = t.world_size;
    } catch (...) {
        // A malformed RANK fails the accelerator's creation with its own message; a warning still gets out.
    }
    if (main_process_only && rank != 0) return;
    emit(message_level, "accel", rank, world, message);
}

void log_as(int32_t message_level, int32_t process_index, int32_t num_processes, const std::string &message)
{
    if (enabled_for(message_level)) emit(message_level, "accel", process_index, num_processes, message);
}

std::string printf_string(const char *format, ...)
{
    va_list args, again;
    va_start(args, format);
    va_copy(again, args);
    const int n = std::vsnprintf(nullptr, 0, format, args);
    va_end(args);
    std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
    va_end(again);
    return out;
}

} // namespace accel::logging
