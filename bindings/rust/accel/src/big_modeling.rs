//! Module sizes and device maps (accel/big_modeling.h): Accelerate's compute_module_sizes, infer_auto_device_map and
//! check_device_map as methods of `Model` (which may be empty: built with `"empty_init": true`).
use crate::{check, cstring, opt_cstring, opt_ptr, owned_string, sys, Model, Result};
use std::os::raw::c_char;
use std::ptr;

impl Model {
    /// Accelerate's infer_auto_device_map: the device map as JSON (`{"model.layers.0": 0, ..., "lm_head": "cpu"}`),
    /// with `options` such as `{"max_memory": {"0": "10GiB", "cpu": "30GiB"}, "no_split_module_classes":
    /// ["LlamaDecoderLayer"], "dtype": "float16"}`.
    pub fn infer_auto_device_map(&self, options: Option<&str>) -> Result<String> {
        let options = opt_cstring("options_json", options)?;
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_model_infer_auto_device_map(self.raw, opt_ptr(&options), &mut out) })?;
        Ok(unsafe { owned_string(out) })
    }

    /// Accelerate's compute_module_sizes and get_max_layer_size as JSON: `{"sizes": {"": total, ...},
    /// "max_layer_size": bytes, "max_layer_names": [...]}`.
    pub fn compute_module_sizes(&self, options: Option<&str>) -> Result<String> {
        let options = opt_cstring("options_json", options)?;
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_model_compute_module_sizes(self.raw, opt_ptr(&options), &mut out) })?;
        Ok(unsafe { owned_string(out) })
    }

    /// Accelerate's check_device_map: an error unless `device_map_json` gives every tensor a device.
    pub fn check_device_map(&self, device_map_json: &str) -> Result<()> {
        let map = cstring("device_map_json", device_map_json)?;
        check(unsafe { sys::accel_model_check_device_map(self.raw, map.as_ptr()) })
    }
}
