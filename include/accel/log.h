/** @file
 * logging: Accelerate's get_logger (a per-process logger that keeps to the main process unless asked), the
 * level (ACCELERATE_LOG_LEVEL), and a callback that routes every message, accel's own warnings included, to
 * the caller's logging system. */
#ifndef ACCEL_LOG_H
#define ACCEL_LOG_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/** A message's severity, or the threshold below which messages are dropped: Python logging's numbers, so a
 *  binding passes them to its language's logging unchanged. */
typedef int32_t accel_log_level_t;
/** Values of accel_log_level_t (any value 0-50 is accepted; these are the named ones). */
enum accel_log_level_enum {
    ACCEL_LOG_NOTSET = 0, /**< as a threshold: every message */
    ACCEL_LOG_DEBUG = 10,
    ACCEL_LOG_INFO = 20,
    ACCEL_LOG_WARNING = 30, /**< the default threshold, as Python's root logger */
    ACCEL_LOG_ERROR = 40,
    ACCEL_LOG_CRITICAL = 50
};

/**
 * Where messages go once they passed the level and the process filter. @p name is the logger's name ("accel"
 * for the library's own messages), @p process_index the rank that logs, @p message the text without any prefix
 * (the callback formats it). Both strings are borrowed for the call.
 * Threads: may run on accel's internal threads (asynchronous checkpoint writers), so it must be thread-safe.
 */
typedef void (*accel_log_fn_t)(void *user_data, accel_log_level_t level, const char *name, int32_t process_index,
                               const char *message);

/**
 * Route every message to @p fn instead of standard error. NULL restores the default, which writes one line
 * "<name>: <level>: <message>" to standard error, prefixed "[rank<i>] " when there are several processes.
 *
 * @param fn         The callback; NULL for the default.
 * @param user_data  Passed to @p fn; must stay valid until the callback is replaced.
 *
 * Ownership: borrows @p user_data. Threads: a process-wide setting; set it before the first accelerator is
 * created (a message being written on another thread while it changes may still reach the old callback).
 */
ACCEL_API void accel_log_set_callback(accel_log_fn_t fn, void *user_data) ACCEL_NOEXCEPT;

/**
 * Set the threshold: messages below @p level are dropped on every path (Accelerate's get_logger(log_level=...)).
 * Overrides ACCELERATE_LOG_LEVEL, which otherwise sets it (DEBUG, INFO, WARNING, ERROR, CRITICAL, any case, or
 * a number 0-50); WARNING when neither is given.
 *
 * @param level  0-50.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for a level outside 0-50.
 * Threads: a process-wide setting, safe from any thread. Give every rank the same level: in_order messages
 * synchronise only the ranks that log them.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_log_set_level(accel_log_level_t level) ACCEL_NOEXCEPT;

/**
 * The current threshold (accel_log_set_level's, else ACCELERATE_LOG_LEVEL's, else WARNING).
 *
 * @param out  Receives the level. Must not be NULL.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for NULL @p out, or when ACCELERATE_LOG_LEVEL holds something
 *         else than a level (the message names it; messages then use WARNING).
 * Threads: safe from any thread.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_log_get_level(accel_log_level_t *out) ACCEL_NOEXCEPT;

/**
 * Log @p message as Accelerate's MultiProcessAdapter.log does: dropped below the threshold; with
 * @p main_process_only, written by the main process only; otherwise by every process, and with @p in_order one
 * process after the other in rank order (a barrier after each rank's turn, so it is a collective: every process
 * must make the call).
 *
 * @param accelerator        The job's accelerator (borrowed); NULL uses the process facts of the environment
 *                           (RANK, WORLD_SIZE, ...), which is enough unless @p in_order is asked.
 * @param name               The logger's name (get_logger(name)); NULL or "" means "accel".
 * @param level              1-50, e.g. ACCEL_LOG_INFO.
 * @param message            UTF-8. Must not be NULL.
 * @param main_process_only  Only the main process writes (Accelerate's default: true).
 * @param in_order           Without @p main_process_only: every process writes in rank order.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for a NULL message or a level outside 1-50;
 *         ACCEL_ERR_FAILED_PRECONDITION for @p in_order without an accelerator in a job of several processes;
 *         the barrier's status (ACCEL_ERR_UNAVAILABLE, ACCEL_ERR_DEADLINE_EXCEEDED, ...) when in_order fails.
 * Ownership: borrows every argument for the call. Threads: same rules as the accelerator.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_log_write(accel_accelerator_t *accelerator, const char *name,
                                                         accel_log_level_t level, const char *message,
                                                         bool main_process_only, bool in_order) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_LOG_H */
