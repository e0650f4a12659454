//! Experiment trackers (accel/tracking.h): `init_trackers`, `log`, `end_training`, `get_tracker`. The
//! trackers are chosen with the accelerator's `"log_with"` ("jsonl", "csv", "tensorboard", "all") and write
//! under `project_config.logging_dir`, on the main process only. Callback trackers
//! (`accel_accelerator_add_tracker`) are reached through `accel-sys`.
use crate::{check, cstring, opt_cstring, opt_ptr, owned_string, sys, Accelerator, Result};
use std::os::raw::c_char;
use std::ptr;

impl Accelerator {
    /// Start the trackers for `project`; `config` is the run's hyperparameters (a JSON object),
    /// `init_kwargs` per-tracker options, e.g. `{"tensorboard": {"flush_secs": 10}}`.
    pub fn init_trackers(&mut self, project: &str, config: Option<&str>, init_kwargs: Option<&str>) -> Result<()> {
        let project = cstring("project_name", project)?;
        let config = opt_cstring("config_json", config)?;
        let init_kwargs = opt_cstring("init_kwargs_json", init_kwargs)?;
        check(unsafe {
            sys::accel_accelerator_init_trackers(self.raw, project.as_ptr(), opt_ptr(&config), opt_ptr(&init_kwargs))
        })
    }

    /// Log a JSON object of numbers and strings at `step` (None: no step).
    pub fn log(&mut self, values: &str, step: Option<i64>) -> Result<()> {
        let values = cstring("values_json", values)?;
        check(unsafe { sys::accel_accelerator_log(self.raw, values.as_ptr(), step.unwrap_or(-1)) })
    }

    /// Close and flush every tracker.
    pub fn end_training(&mut self) -> Result<()> {
        check(unsafe { sys::accel_accelerator_end_training(self.raw) })
    }

    /// One tracker as JSON (`{"name", "main_process", "logging_dir", "files"}`).
    pub fn tracker_json(&mut self, name: &str) -> Result<String> {
        let name = cstring("name", name)?;
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_get_tracker_json(self.raw, name.as_ptr(), &mut out) })?;
        Ok(unsafe { owned_string(out) })
    }
}
