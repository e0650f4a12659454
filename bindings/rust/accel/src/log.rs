//! Logging (accel/log.h): Accelerate's `get_logger` filters as free functions (`write` with
//! `main_process_only` / `in_order`), the level (`ACCELERATE_LOG_LEVEL` or `set_level`) and a closure that
//! receives every message, libaccel's own warnings included (`set_callback`). No `log` crate is vendored on
//! this project's build machines, so the routing is a closure: forward to `log::log!`, `tracing` or a file
//! from it.
use crate::{check, cstring, sys, Accelerator, Result};
use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::ptr;

/// Python logging's numbers, as accel/log.h uses them.
pub const DEBUG: i32 = 10;
pub const INFO: i32 = 20;
pub const WARNING: i32 = 30;
pub const ERROR: i32 = 40;
pub const CRITICAL: i32 = 50;

/// A message's receiver: `(level, logger name, process index, message)`. May run on libaccel's own threads.
pub type LogFn = dyn Fn(i32, &str, i32, &str) + Send + Sync;

unsafe extern "C" fn log_trampoline(
    user_data: *mut c_void,
    level: sys::accel_log_level_t,
    name: *const c_char,
    process_index: i32,
    message: *const c_char,
) {
    let f = &*(user_data as *const Box<LogFn>);
    let text = |p: *const c_char| if p.is_null() { "" } else { CStr::from_ptr(p).to_str().unwrap_or("") };
    // A panic must not unwind into C; the message is then lost, as a panicking logger loses it.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(level, text(name), process_index, text(message))));
}

/// Route every message to `f` instead of standard error. Set it before the first accelerator. A replaced
/// closure is kept alive (leaked) for the process: another thread may still be inside it.
pub fn set_callback<F>(f: F)
where
    F: Fn(i32, &str, i32, &str) + Send + Sync + 'static,
{
    let boxed: &'static mut Box<LogFn> = Box::leak(Box::new(Box::new(f)));
    unsafe { sys::accel_log_set_callback(Some(log_trampoline), boxed as *mut Box<LogFn> as *mut c_void) };
}

/// Back to standard error ("name: level: message", "[rank<i>] " first with several processes).
pub fn reset_callback() {
    unsafe { sys::accel_log_set_callback(None, ptr::null_mut()) };
}

/// The threshold, 0-50; overrides `ACCELERATE_LOG_LEVEL`.
pub fn set_level(level: i32) -> Result<()> {
    check(unsafe { sys::accel_log_set_level(level) })
}

/// The threshold: `set_level`'s, else `ACCELERATE_LOG_LEVEL`'s, else `WARNING`.
pub fn level() -> Result<i32> {
    let mut v = 0;
    check(unsafe { sys::accel_log_get_level(&mut v) })?;
    Ok(v)
}

/// `MultiProcessAdapter.log`: dropped below the level; with `main_process_only` the main process only; else
/// every process, in rank order with `in_order` (a collective; needs the accelerator with several processes).
pub fn write(
    accelerator: Option<&mut Accelerator>,
    name: &str,
    level: i32,
    message: &str,
    main_process_only: bool,
    in_order: bool,
) -> Result<()> {
    let name = cstring("name", name)?;
    let message = cstring("message", message)?;
    let raw = accelerator.map_or(ptr::null_mut(), |a| a.raw);
    check(unsafe { sys::accel_log_write(raw, name.as_ptr(), level, message.as_ptr(), main_process_only, in_order) })
}
