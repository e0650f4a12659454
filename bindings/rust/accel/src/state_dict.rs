//! `Accelerator::get_state_dict` (accel/checkpoint.h's accel_accelerator_get_state_dict): Accelerate's
//! `get_state_dict(model)` in one call, as (key, tensor) pairs in the model's order.
use crate::{check, opt_cstring, opt_ptr, sys, Accelerator, Error, Model, Result, Status, Tensor};
use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr;

/// The C state dict, freed however the copy out of it ends (the tensors taken from it stay valid).
struct OwnedStateDict(*mut sys::accel_state_dict_t);

impl Drop for OwnedStateDict {
    fn drop(&mut self) {
        unsafe { sys::accel_state_dict_free(self.0) }
    }
}

impl Accelerator {
    /// Accelerate's `get_state_dict(model)`: the model's state dict as (key, tensor) pairs in its order
    /// (parameters, then buffers; copies). A model sharded by fsdp_plugin / deepspeed_plugin is gathered whole
    /// first: call it on every process then; under FSDP and ZeRO-3 only process 0 receives the entries, as in
    /// Accelerate (the others an empty Vec). Options (None: the defaults): `{"unwrap": true, "rank0_only": null |
    /// true | false}`.
    pub fn get_state_dict(&mut self, model: &Model, options: Option<&str>) -> Result<Vec<(String, Tensor)>> {
        let options = opt_cstring("options_json", options)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_get_state_dict(self.raw, model.raw, opt_ptr(&options), &mut raw) })?;
        let sd = OwnedStateDict(raw);
        let mut count = 0usize;
        check(unsafe { sys::accel_state_dict_get_count(sd.0, &mut count) })?;
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let mut key: *const c_char = ptr::null();
            check(unsafe { sys::accel_state_dict_get_key(sd.0, i, &mut key) })?;
            let key = unsafe { CStr::from_ptr(key) }
                .to_str()
                .map_err(|_| Error::new(Status::Internal, "state-dict key is not UTF-8"))?
                .to_owned();
            let mut tensor = ptr::null_mut();
            check(unsafe { sys::accel_state_dict_get_tensor(sd.0, i, &mut tensor) })?;
            out.push((key, Tensor { raw: tensor }));
        }
        Ok(out)
    }
}
