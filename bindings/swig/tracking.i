/* tracking.i - accel/tracking.h: experiment trackers (Accelerator.init_trackers / log / end_training /
 * get_tracker). Included by accel.i after the classes. Trackers are chosen with the accelerator's
 * "log_with" ("jsonl", "csv", "tensorboard", "all") and write under project_config.logging_dir.
 *
 * Not wrapped: accel_accelerator_add_tracker (a C callback; it would need SWIG directors in three
 * languages). */

%extend Accelerator {
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
