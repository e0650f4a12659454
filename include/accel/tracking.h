/** @file
 * experiment trackers: init_trackers, log, end_training, get_tracker, callback trackers. */
#ifndef ACCEL_TRACKING_H
#define ACCEL_TRACKING_H

#include <accel/common.h>
#include <accel/status.h>
#include <accel/types.h>

ACCEL_BEGIN_DECLS

/** What a callback tracker is told (the `event` argument of accel_tracker_fn_t). */
typedef int32_t accel_tracker_event_t;
/** Values of accel_tracker_event_t. */
enum accel_tracker_event_enum {
    /** init_trackers: json is {"project_name": "...", "config": {...}, "init_kwargs": {...}}; step is -1. */
    ACCEL_TRACKER_EVENT_INIT = 0,
    /** log: json is the values object as given to accel_accelerator_log(); step as given (-1: none). */
    ACCEL_TRACKER_EVENT_LOG = 1,
    /** end_training: json is "{}"; step is -1. */
    ACCEL_TRACKER_EVENT_FINISH = 2
};

/**
 * A tracker written by the caller (Accelerate's GeneralTracker subclass): called on the main process
 * only, on the thread that calls init_trackers / log / end_training, during that call. @p json is
 * borrowed for the call. Return ACCEL_OK, or any other status to make the accel call fail with it
 * (the message names the tracker).
 */
typedef accel_status_t (*accel_tracker_fn_t)(void *user_data, accel_tracker_event_t event, const char *json,
                                             int64_t step);

/**
 * Add a callback tracker beside the built-in ones of log_with (Accelerate's log_with=[MyTracker(...)]),
 * before accel_accelerator_init_trackers(). Use it to feed a metrics system accel does not build in
 * (wandb, MLflow, a JVM service's own metrics, ...).
 *
 * @param name      Unique among the accelerator's trackers; not "jsonl", "csv", "tensorboard", "all".
 * @param fn        Must not be NULL.
 * @param user_data Passed to @p fn; must stay valid until end_training or until the accelerator is freed.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT for a NULL/empty/taken name or NULL @p fn;
 *         ACCEL_ERR_FAILED_PRECONDITION after init_trackers.
 * Ownership: copies @p name, borrows @p user_data. Threads: same rules as the accelerator.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_add_tracker(accel_accelerator_t *accelerator, const char *name,
                                                                       accel_tracker_fn_t fn,
                                                                       void *user_data) ACCEL_NOEXCEPT;

/**
 * Start every tracker (Accelerator.init_trackers): those named by the config's "log_with" ("jsonl",
 * "csv", "tensorboard", or "all") and the callback trackers. On the main process only (others check
 * their arguments and do nothing, as Accelerate): files go to
 * \<project_config.logging_dir\>/\<project_name\>/: metrics.jsonl (one JSON object a line), metrics.csv
 * (step,wall_time,key,value) with config.json, and a TensorBoard event file
 * events.out.tfevents.\<time\>.\<host\>.\<pid\>.\<n\> that TensorBoard opens (the run configuration is a text
 * summary "config").
 *
 * @param project_name     A folder name (no '/'). Must not be NULL.
 * @param config_json      The run's hyperparameters as a JSON object, or NULL.
 * @param init_kwargs_json NULL, or {"<tracker name>": {...}} for active trackers: "tensorboard" takes
 *                         "filename_suffix" (string) and "flush_secs" (0..86400, default 120: how often
 *                         the event file is flushed); "jsonl" and "csv" take none (they flush every
 *                         log); a callback tracker gets its object in the INIT event.
 * @return ACCEL_OK; ACCEL_ERR_INVALID_ARGUMENT naming the argument or JSON path;
 *         ACCEL_ERR_FAILED_PRECONDITION when there are no trackers or init_trackers already ran;
 *         ACCEL_ERR_PERMISSION_DENIED when a folder or file cannot be created; a callback's status.
 * Threads: same rules as the accelerator. Not collective.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * Ownership: borrows its arguments for the call; keeps none of them.
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_init_trackers(accel_accelerator_t *accelerator,
                                                                         const char *project_name,
                                                                         const char *config_json,
                                                                         const char *init_kwargs_json) ACCEL_NOEXCEPT;

/**
 * Log values to every tracker (Accelerator.log), on the main process only.
 *
 * @param values_json A JSON object of numbers (TensorBoard scalars), strings (text summaries), or nested
 *                    objects of those (keys joined as "outer/inner"). Must not be NULL or empty.
 * @param step        The step, or a negative value for none (TensorBoard then records step 0, JSONL null).
 * @return ACCEL_OK (also when no tracker was configured at all: like Accelerate, nothing happens);
 *         ACCEL_ERR_INVALID_ARGUMENT naming values_json.\<key\>; ACCEL_ERR_FAILED_PRECONDITION when trackers
 *         are configured but init_trackers was not called; a callback's status; a write error.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_log(accel_accelerator_t *accelerator, const char *values_json,
                                                               int64_t step) ACCEL_NOEXCEPT;

/**
 * Finish every tracker (Accelerator.end_training): close and flush the files, send FINISH to callback
 * trackers. Afterwards init_trackers may be called again. Unlike Accelerate, the process group is kept.
 * @return ACCEL_OK (also when nothing was started); a callback's status or a close error.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * Ownership: borrows its arguments for the call; keeps none of them.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_end_training(accel_accelerator_t *accelerator) ACCEL_NOEXCEPT;

/**
 * Describe one tracker (Accelerator.get_tracker) as JSON: {"name", "main_process": true, "logging_dir",
 * "files": [...]} for a file tracker, {"name", "main_process": true, "callback": true} for a callback
 * one, and {"name", "main_process": false} on other processes (Accelerate's blank tracker).
 *
 * @param out Receives a string to free with accel_string_free().
 * @return ACCEL_OK; ACCEL_ERR_NOT_FOUND for an unknown name; ACCEL_ERR_FAILED_PRECONDITION before
 *         init_trackers.
 *
 * @param accelerator  The accelerator (borrowed for the call). Must not be NULL.
 * @param name  The tracker's name ("jsonl", "csv", "tensorboard" or a callback tracker's). Must not be NULL.
 * Ownership: borrows its handle arguments for the call; the caller owns what *out receives.
 * Threads: an accelerator and every object it prepared may move between threads but must not be used from two
 * threads at once (docs/concepts/ownership-threads.md).
 */
ACCEL_NODISCARD ACCEL_API accel_status_t accel_accelerator_get_tracker_json(accel_accelerator_t *accelerator,
                                                                            const char *name, char **out) ACCEL_NOEXCEPT;

ACCEL_END_DECLS

#endif /* ACCEL_TRACKING_H */
