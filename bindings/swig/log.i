/* log.i - accel/log.h: the level (log_set_level / log_get_level, ACCELERATE_LOG_LEVEL), log_write
 * (MultiProcessAdapter.log) and a LogCallback written in this language (a SWIG director) that receives every
 * message, the library's own warnings included. Each language's package routes it to its logging: Python
 * `logging` (accel/_logging.py, installed on import), java.util.logging (org.accel.AccelLogging), .NET Trace
 * (Accel.AccelLogging). Included by accel.i after the classes. */

/* LOG_DEBUG ... LOG_CRITICAL (the functions of the header stay ignored). */
%include <accel/log.h>

%feature("director") LogCallback;
%inline %{
/** Receives every message that passed the level and the process filter: @p level as Python's logging numbers
 *  (10 DEBUG ... 50 CRITICAL), @p name the logger's ("accel" for the library's own), @p process_index the rank.
 *  May be called on accel's internal threads: keep it thread-safe. An exception thrown in it is dropped (the
 *  message then goes to standard error). */
class LogCallback {
public:
    virtual ~LogCallback() {}
    virtual void on_message(int32_t level, const std::string &name, int32_t process_index,
                            const std::string &message) = 0;
};
%}
%{
#include <cstdio>
namespace accel_swig {
/* accel_log_fn_t over a LogCallback. A logging callback has no status to return: what it raised is said on
 * standard error together with the message, so neither is lost. */
inline void log_trampoline(void *ud, accel_log_level_t level, const char *name, int32_t process_index,
                           const char *message)
{
    try {
        static_cast<LogCallback *>(ud)->on_message(level, name ? name : "", process_index, message ? message : "");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "accel: a log callback raised (%s); the message was: %s\n", e.what(), message);
    } catch (...) {
        std::fprintf(stderr, "accel: a log callback raised; the message was: %s\n", message);
    }
}
} // namespace accel_swig
%}

%inline %{
/** Route every message to @p callback (None/null: back to standard error). The caller keeps @p callback alive
 *  while it is set (the language packages keep it in a static). Set it before the first accelerator. */
void log_set_callback(LogCallback *callback)
{
    if (callback == NULL)
        accel_log_set_callback(NULL, NULL);
    else
        accel_log_set_callback(accel_swig::log_trampoline, callback);
}
/** The threshold, 0-50 (Accelerate's get_logger(log_level=...)); overrides ACCELERATE_LOG_LEVEL. */
void log_set_level(int32_t level) { ACCEL_CHECK(accel_log_set_level(level)); }
/** The threshold: log_set_level's, else ACCELERATE_LOG_LEVEL's, else 30 (WARNING). */
int32_t log_get_level()
{
    accel_log_level_t v = 0;
    ACCEL_CHECK(accel_log_get_level(&v));
    return v;
}
/** MultiProcessAdapter.log: dropped below the level; with @p main_process_only the main process only; else
 *  every process, in rank order with @p in_order (a collective: every process calls it; needs @p accelerator
 *  when there are several processes). @p accelerator may be None/null. */
void log_write(Accelerator *accelerator, const char *name, int32_t level, const char *message,
               bool main_process_only = true, bool in_order = false)
{
    accel_accelerator_t *acc = ACCEL_OPT_H(accelerator, "Accelerator");
    if (accelerator && !acc) return; /* closed: the error is pending */
    ACCEL_CHECK(accel_log_write(acc, name, level, message, main_process_only, in_order));
}
%}
