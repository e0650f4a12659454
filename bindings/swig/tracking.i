/* tracking.i - accel/tracking.h: experiment trackers (Accelerator.init_trackers / log / end_training /
 * get_tracker). Included by accel.i after the classes. Trackers are chosen with the accelerator's
 * "log_with" ("jsonl", "csv", "tensorboard", "all") and write under project_config.logging_dir; trackers
 * written in the binding's language subclass TrackerCallback (a SWIG director) and are added with
 * add_tracker (accel_accelerator_add_tracker with a trampoline). */

/* TRACKER_EVENT_INIT / _LOG / _FINISH (the functions of the header stay ignored). */
%include <accel/tracking.h>

%feature("director") TrackerCallback;
%inline %{
/** A tracker written in this language (Accelerate's GeneralTracker): subclass it, override on_event and
 *  add it with Accelerator.add_tracker before init_trackers. Called on the main process only, on the thread
 *  that calls init_trackers / log / end_training. */
class TrackerCallback {
public:
    virtual ~TrackerCallback() {}
    /** @p event: TRACKER_EVENT_INIT (json {"project_name", "config", "init_kwargs"}), TRACKER_EVENT_LOG
     *  (json: the values, @p step as given, -1 for none), TRACKER_EVENT_FINISH (json "{}").
     *  Return 0, or a status code to make the accel call fail with it (the message names the tracker). */
    virtual int32_t on_event(int32_t event, const std::string &json, int64_t step) = 0;
};
%}
%{
#include <stdexcept>
namespace accel_swig {
/* accel_tracker_fn_t over a TrackerCallback: an exception thrown by the language's code (Python, or a
 * SWIG DirectorException from Java / C#) fails the call with its text. */
accel_status_t tracker_trampoline(void *user_data, accel_tracker_event_t event, const char *json, int64_t step)
{
    try {
        return static_cast<TrackerCallback *>(user_data)->on_event(event, json ? json : "", step);
    } catch (const std::exception &e) {
        fail(ACCEL_ERR_UNKNOWN, (std::string("a tracker callback raised: ") + e.what()).c_str());
    } catch (...) {
        fail(ACCEL_ERR_UNKNOWN, "a tracker callback raised an exception");
    }
    return ACCEL_ERR_UNKNOWN;
}
} // namespace accel_swig
%}

%extend Accelerator {
    /** Add a tracker written in this language beside those of log_with, before init_trackers. The
     *  accelerator keeps a reference to @p callback. */
    void add_tracker(const char *name, TrackerCallback *callback)
    {
        if (callback == NULL) {
            accel_swig::fail(ACCEL_ERR_INVALID_ARGUMENT, "callback: must not be None/null");
            return;
        }
        ACCEL_CHECK(accel_accelerator_add_tracker(ACCEL_H($self, "Accelerator"), name, accel_swig::tracker_trampoline,
                                                  callback));
    }
    /** Start the trackers for @p project_name; @p config_json is the run's hyperparameters (a JSON object),
     *  @p init_kwargs_json per-tracker options, e.g. {"tensorboard": {"flush_secs": 10}}. Main process only. */
    void init_trackers(const char *project_name, const char *config_json = NULL, const char *init_kwargs_json = NULL)
    {
        ACCEL_CHECK(accel_accelerator_init_trackers(ACCEL_H($self, "Accelerator"), project_name, config_json,
                                                    init_kwargs_json));
    }
    /** Log a JSON object of numbers / strings (nested objects joined as "outer/inner") at @p step (negative:
     *  none). Main process only. */
    void log(const char *values_json, int64_t step = -1)
    {
        ACCEL_CHECK(accel_accelerator_log(ACCEL_H($self, "Accelerator"), values_json, step));
    }
    /** Close and flush every tracker (Accelerator.end_training). */
    void end_training() { ACCEL_CHECK(accel_accelerator_end_training(ACCEL_H($self, "Accelerator"))); }
    /** One tracker as JSON: {"name", "main_process", "logging_dir", "files"} (Accelerator.get_tracker). */
    std::string get_tracker_json(const char *name)
    {
        char *out = NULL;
        ACCEL_CHECK(accel_accelerator_get_tracker_json(ACCEL_H($self, "Accelerator"), name, &out));
        return accel_swig::owned_string(out);
    }
}
