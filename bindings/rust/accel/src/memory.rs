//! Accelerate's find_executable_batch_size (accel/memory.h): run a closure with a batch size and, while it runs
//! out of memory, run it again with a smaller one.
use crate::datasets::callback_status;
use crate::{check, opt_cstring, opt_ptr, sys, Result};
use std::ffi::c_void;

type StepFn<'a> = dyn FnMut(i64) -> Result<()> + 'a;

unsafe extern "C" fn step_trampoline(user_data: *mut c_void, batch_size: i64) -> sys::accel_status_t {
    let f = &mut *(user_data as *mut &mut StepFn);
    // A panic must not unwind into C: it ends the search with ACCEL_ERR_UNKNOWN.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(batch_size)));
    callback_status(r, "a panic in the find_executable_batch_size step")
}

/// Calls `step(batch_size)` from `starting_batch_size` on; while it fails for lack of memory (an `Err` with
/// `Status::ResourceExhausted`, which every accel call returns when an allocation fails, or whose message says
/// "out of memory"), frees memory and calls it again with `floor(batch_size * reduce_batch_size_factor)`.
/// Returns the batch size with which `step` returned `Ok`. `options`: JSON with "reduce_batch_size_factor"
/// (0.5 by default; 0.9 as Accelerate 1.9+) and "max_memory_bytes" (a budget for LibTorch's CPU allocations
/// while the step runs). Another error of `step` ends the search with its status, the message prefixed with the
/// batch size; reaching zero is `Status::ResourceExhausted` ("no executable batch size found, reached zero").
pub fn find_executable_batch_size<F>(starting_batch_size: i64, options: Option<&str>, mut step: F) -> Result<i64>
where
    F: FnMut(i64) -> Result<()>,
{
    let options = opt_cstring("options", options)?;
    let mut f: &mut StepFn = &mut step;
    let mut found = 0i64;
    check(unsafe {
        sys::accel_find_executable_batch_size(
            starting_batch_size,
            opt_ptr(&options),
            Some(step_trampoline),
            &mut f as *mut &mut StepFn as *mut c_void,
            &mut found,
        )
    })?;
    Ok(found)
}
