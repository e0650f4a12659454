//! save_state / load_state pre-hooks (accel/checkpoint.h): Accelerate's `register_save_state_pre_hook` and
//! `register_load_state_pre_hook` as closures called with the checkpoint folder and the process index.
use crate::{check, sys, Accelerator, Result, Status};
use std::ffi::{c_void, CStr};
use std::os::raw::c_char;

/// A pre-hook written in Rust: `Err(status)` fails save_state / load_state with that status on every process.
pub type StateHookFn = dyn FnMut(&str, i32) -> std::result::Result<(), Status> + Send;

/// The handle of a registered hook: pass it to [`Accelerator::remove_state_hook`] (RemovableHandle.remove()).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateHookHandle(pub i64);

unsafe extern "C" fn state_hook_trampoline(
    user_data: *mut c_void,
    folder: *const c_char,
    process_index: i32,
) -> sys::accel_status_t {
    let f = &mut *(user_data as *mut Box<StateHookFn>);
    let folder = if folder.is_null() { "" } else { CStr::from_ptr(folder).to_str().unwrap_or("") };
    // A panic must not unwind into C: it fails the call instead.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(folder, process_index))) {
        Ok(Ok(())) => 0,
        Ok(Err(status)) => status.code(),
        Err(_) => Status::Unknown.code(),
    }
}

/// The library releases the closure when the hook is removed or the accelerator freed.
unsafe extern "C" fn release_state_hook(user_data: *mut c_void) {
    drop(Box::from_raw(user_data as *mut Box<StateHookFn>));
}

impl Accelerator {
    fn register_state_hook(&mut self, save: bool, f: Box<StateHookFn>) -> Result<StateHookHandle> {
        let user = Box::into_raw(Box::new(f)) as *mut c_void;
        let mut handle = 0i64;
        let status = unsafe {
            if save {
                sys::accel_accelerator_register_save_state_pre_hook(
                    self.raw, Some(state_hook_trampoline), Some(release_state_hook), user, &mut handle)
            } else {
                sys::accel_accelerator_register_load_state_pre_hook(
                    self.raw, Some(state_hook_trampoline), Some(release_state_hook), user, &mut handle)
            }
        };
        if status != 0 {
            unsafe { release_state_hook(user) }; // a failed registration keeps nothing
        }
        check(status).map(|_| StateHookHandle(handle))
    }

    /// Register a save_state pre-hook: `f(folder, process_index)` runs on every process before save_state
    /// writes into `folder` (files it adds there are part of the checkpoint).
    pub fn register_save_state_pre_hook<F>(&mut self, f: F) -> Result<StateHookHandle>
    where
        F: FnMut(&str, i32) -> std::result::Result<(), Status> + Send + 'static,
    {
        self.register_state_hook(true, Box::new(f))
    }

    /// Register a load_state pre-hook: `f(folder, process_index)` runs before load_state reads `folder`.
    pub fn register_load_state_pre_hook<F>(&mut self, f: F) -> Result<StateHookHandle>
    where
        F: FnMut(&str, i32) -> std::result::Result<(), Status> + Send + 'static,
    {
        self.register_state_hook(false, Box::new(f))
    }

    /// Remove a pre-hook (its closure is dropped now); `Status::NotFound` when it is not registered.
    pub fn remove_state_hook(&mut self, handle: StateHookHandle) -> Result<()> {
        check(unsafe { sys::accel_accelerator_remove_state_hook(self.raw, handle.0) })
    }
}
