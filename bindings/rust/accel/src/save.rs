//! `Accelerator::save` (accel/checkpoint.h's accel_accelerator_save): named tensors to one safetensors file,
//! written by the main process only.
use crate::{check, cstring, sys, Accelerator, Result, Tensor};
use std::os::raw::c_char;

impl Accelerator {
    /// Accelerate's `save` for named tensors: `tensors` to `path` as safetensors, on the main process only (the
    /// others return at once).
    pub fn save(&mut self, tensors: &[(&str, &Tensor)], path: &str) -> Result<()> {
        let path = cstring("path", path)?;
        let keys = tensors.iter().map(|(k, _)| cstring("keys", k)).collect::<Result<Vec<_>>>()?;
        let key_ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
        let raws: Vec<*const sys::accel_tensor_t> = tensors.iter().map(|(_, t)| t.raw as *const _).collect();
        check(unsafe {
            sys::accel_accelerator_save(self.raw, key_ptrs.as_ptr(), raws.as_ptr(), raws.len(), path.as_ptr())
        })
    }
}
