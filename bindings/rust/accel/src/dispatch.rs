//! Dispatch with CPU and disk offload (accel/dispatch.h): Accelerate's dispatch_model and
//! load_checkpoint_and_dispatch as methods of `Model`.
use crate::{check, cstring, opt_cstring, opt_ptr, sys, Model, Result};

impl Model {
    /// Accelerate's dispatch_model: each module where `device_map_json` says (`{"model.layers.0": "disk", "": "cpu"}`);
    /// disk modules live in options' `"offload_dir"` (Accelerate's offload folder: index.json + one .dat per
    /// tensor) and are read there layer by layer during `forward_no_grad` and `generate`.
    pub fn dispatch(&mut self, device_map_json: &str, options: Option<&str>) -> Result<()> {
        let map = cstring("device_map_json", device_map_json)?;
        let options = opt_cstring("options_json", options)?;
        check(unsafe { sys::accel_model_dispatch(self.raw, map.as_ptr(), opt_ptr(&options)) })
    }

    /// Accelerate's load_checkpoint_and_dispatch: loads `checkpoint_path`, then dispatches with options'
    /// `"device_map"` (an object) and `"offload_folder"`.
    pub fn load_checkpoint_and_dispatch(&mut self, checkpoint_path: &str, options: Option<&str>) -> Result<()> {
        let path = cstring("checkpoint_path", checkpoint_path)?;
        let options = opt_cstring("options_json", options)?;
        check(unsafe { sys::accel_model_load_checkpoint_and_dispatch(self.raw, path.as_ptr(), opt_ptr(&options)) })
    }
}
