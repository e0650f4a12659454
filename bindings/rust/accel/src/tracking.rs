//! Experiment trackers (accel/tracking.h): `init_trackers`, `log`, `end_training`, `get_tracker`. The
//! trackers are chosen with the accelerator's `"log_with"` ("jsonl", "csv", "tensorboard", "all") and write
//! under `project_config.logging_dir`, on the main process only. Trackers written in Rust are closures
//! added with `add_tracker`.
use crate::{check, cstring, opt_cstring, opt_ptr, owned_string, sys, Accelerator, Result, Status};
use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::ptr;

/// What a tracker closure is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackerEvent {
    /// `init_trackers`: the JSON is `{"project_name", "config", "init_kwargs"}`, the step -1.
    Init,
    /// `log`: the JSON is the values, the step as given (-1: none).
    Log,
    /// `end_training`: the JSON is `{}`, the step -1.
    Finish,
}

/// A tracker written in Rust: `Err(status)` makes the accel call fail with that status.
pub type TrackerFn = dyn FnMut(TrackerEvent, &str, i64) -> std::result::Result<(), Status> + Send;

unsafe extern "C" fn tracker_trampoline(
    user_data: *mut c_void,
    event: sys::accel_tracker_event_t,
    json: *const c_char,
    step: i64,
) -> sys::accel_status_t {
    let f = &mut *(user_data as *mut Box<TrackerFn>);
    let json = if json.is_null() { "" } else { CStr::from_ptr(json).to_str().unwrap_or("") };
    let event = match event {
        0 => TrackerEvent::Init,
        1 => TrackerEvent::Log,
        _ => TrackerEvent::Finish,
    };
    // A panic must not unwind into C: it fails the call instead.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(event, json, step))) {
        Ok(Ok(())) => 0,
        Ok(Err(status)) => status.code(),
        Err(_) => Status::Unknown.code(),
    }
}

impl Accelerator {
    /// Add a tracker written in Rust beside those of `log_with`, before `init_trackers` (Accelerate's
    /// `log_with=[MyTracker()]`). Called on the main process only, during init_trackers / log /
    /// end_training. The accelerator owns the closure until it is dropped.
    pub fn add_tracker<F>(&mut self, name: &str, f: F) -> Result<()>
    where
        F: FnMut(TrackerEvent, &str, i64) -> std::result::Result<(), Status> + Send + 'static,
    {
        let name = cstring("name", name)?;
        let mut boxed: Box<Box<TrackerFn>> = Box::new(Box::new(f));
        let user = &mut *boxed as *mut Box<TrackerFn> as *mut c_void;
        check(unsafe { sys::accel_accelerator_add_tracker(self.raw, name.as_ptr(), Some(tracker_trampoline), user) })?;
        self.trackers.push(boxed);
        Ok(())
    }

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
