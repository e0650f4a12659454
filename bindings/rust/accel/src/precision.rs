//! Mixed precision and gradient handling: autocast blocks, the gradient scaler's state, unscaling and
//! value clipping, and the accelerator's remaining state queries.
use crate::distributed::Scope;
use crate::{check, sys, Accelerator, Model, Optimizer, Result};
use std::ptr;

impl Accelerator {
    /// Enter `autocast()` for code outside train_step (an unwrapped forward, a loss); ends when the guard
    /// is dropped.
    pub fn autocast(&mut self) -> Result<Scope<'_>> {
        check(unsafe { sys::accel_accelerator_autocast_begin(self.raw) })?;
        Ok(Scope::new(self, sys::accel_accelerator_autocast_end))
    }

    /// `accelerator.profile()`: LibTorch's profiler until the guard ends; the Chrome trace goes to
    /// kwargs_handlers.profile.output_trace_dir/profile_{process_index}.json. Ending it waits for every process;
    /// call `end()` on the guard to see its error (dropping ignores it).
    pub fn profile(&mut self) -> Result<Scope<'_>> {
        check(unsafe { sys::accel_accelerator_profile_begin(self.raw) })?;
        Ok(Scope::new(self, sys::accel_accelerator_profile_end))
    }

    /// The mixed-precision mode (`ACCEL_MIXED_PRECISION_*`: 0 no, 1 fp16, 2 bf16, 3 fp8).
    pub fn mixed_precision(&self) -> Result<i32> {
        self.query(sys::accel_accelerator_get_mixed_precision)
    }

    pub fn has_grad_scaler(&self) -> Result<bool> {
        self.query(sys::accel_accelerator_has_grad_scaler)
    }

    /// The gradient scaler's current loss scale (1.0 without a scaler).
    pub fn grad_scale(&self) -> Result<f64> {
        self.query(sys::accel_accelerator_get_grad_scale)
    }

    /// Whether the last optimizer step was skipped (non-finite gradients under the scaler).
    pub fn optimizer_step_was_skipped(&self) -> Result<bool> {
        self.query(sys::accel_accelerator_optimizer_step_was_skipped)
    }

    /// Unscale the gradients of `optimizer` (None: every prepared optimizer) before clipping by hand.
    pub fn unscale_gradients(&mut self, optimizer: Option<&mut Optimizer>) -> Result<()> {
        let o = optimizer.map_or(ptr::null_mut(), |o| o.raw);
        check(unsafe { sys::accel_accelerator_unscale_gradients(self.raw, o) })
    }

    /// Clamp every gradient of `model` into [-clip_value, clip_value].
    pub fn clip_grad_value(&mut self, model: &mut Model, clip_value: f64) -> Result<()> {
        check(unsafe { sys::accel_accelerator_clip_grad_value(self.raw, model.raw, clip_value) })
    }

    /// Whether the current batch is the last of a prepared loader's pass.
    pub fn end_of_dataloader(&self) -> Result<bool> {
        self.query(sys::accel_accelerator_get_end_of_dataloader)
    }
}
