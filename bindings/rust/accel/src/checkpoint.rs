//! accel/checkpoint.h: save/load state with options, save_model, loading weights into a model, byte
//! blobs registered for checkpointing. (Callback registration, accel_accelerator_register_for_checkpointing,
//! is reachable through `accel_sys` only.)
use crate::{check, check_abi, cstring, opt_cstring, opt_ptr, owned_string, sys, Accelerator, Model, Result};
use std::os::raw::c_char;
use std::ptr;

impl Accelerator {
    /// Save the state into `dir` (None: the next automatic checkpoint folder) with `options`, e.g.
    /// `{"safe_serialization": false}`. Returns the folder written.
    pub fn save_state_with_options(&mut self, dir: Option<&str>, options: Option<&str>) -> Result<String> {
        let dir = opt_cstring("output_dir", dir)?;
        let options = opt_cstring("options_json", options)?;
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe {
            sys::accel_accelerator_save_state_with_options(self.raw, opt_ptr(&dir), opt_ptr(&options), &mut out)
        })?;
        Ok(unsafe { owned_string(out) })
    }

    /// Wait for the asynchronous save (`{"async": true}`) in progress, if any; returns its failure.
    pub fn wait_for_checkpoint(&mut self) -> Result<()> {
        check(unsafe { sys::accel_accelerator_wait_for_checkpoint(self.raw) })
    }

    /// Load a state (None: the newest automatic checkpoint) with `options`, e.g. `{"strict": false}`.
    /// Returns the folder loaded.
    pub fn load_state_with_options(&mut self, dir: Option<&str>, options: Option<&str>) -> Result<String> {
        let dir = opt_cstring("input_dir", dir)?;
        let options = opt_cstring("options_json", options)?;
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe {
            sys::accel_accelerator_load_state_with_options(self.raw, opt_ptr(&dir), opt_ptr(&options), &mut out)
        })?;
        Ok(unsafe { owned_string(out) })
    }

    /// Automatic resume: loads the newest complete automatic checkpoint and returns true, or returns false on a
    /// fresh start (no checkpoint yet). Needs `project_config.automatic_checkpoint_naming`.
    pub fn load_latest_state(&mut self) -> Result<bool> {
        let mut found = false;
        check(unsafe { sys::accel_accelerator_load_latest_state(self.raw, &mut found) })?;
        Ok(found)
    }

    /// Save `model`'s weights for inference (model.safetensors, or shards beyond `{"max_shard_size": ...}`).
    pub fn save_model(&mut self, model: &Model, dir: &str, options: Option<&str>) -> Result<()> {
        let dir = cstring("save_directory", dir)?;
        let options = opt_cstring("options_json", options)?;
        check(unsafe { sys::accel_accelerator_save_model(self.raw, model.raw, dir.as_ptr(), opt_ptr(&options)) })
    }

    /// The number the next automatic checkpoint gets.
    pub fn project_iteration(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::accel_accelerator_get_project_iteration(self.raw, &mut v) })?;
        Ok(v)
    }

    /// Register a byte blob saved by save_state and replaced by load_state; returns its index.
    pub fn register_bytes_for_checkpointing(&mut self, data: &[u8]) -> Result<i32> {
        let mut index = -1;
        check(unsafe {
            sys::accel_accelerator_register_bytes_for_checkpointing(self.raw, data.as_ptr(), data.len(), &mut index)
        })?;
        Ok(index)
    }

    /// The current bytes of the blob at `index`, borrowed: the library keeps them until the next
    /// load_state or registration, which need `&mut self`.
    pub fn checkpointing_bytes(&self, index: i32) -> Result<&[u8]> {
        let mut data: *const u8 = ptr::null();
        let mut len = 0usize;
        check(unsafe { sys::accel_accelerator_get_checkpointing_bytes(self.raw, index, &mut data, &mut len) })?;
        Ok(if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(data, len) } })
    }
}

impl Model {
    /// Load weights from a .safetensors / torch.save file or a (sharded) checkpoint folder, with
    /// `options`, e.g. `{"strict": true, "dtype": "bfloat16"}`.
    pub fn load_checkpoint(&mut self, path: &str, options: Option<&str>) -> Result<()> {
        let path = cstring("path", path)?;
        let options = opt_cstring("options_json", options)?;
        check(unsafe { sys::accel_model_load_checkpoint(self.raw, path.as_ptr(), opt_ptr(&options)) })
    }

    /// [`Model::load_checkpoint`], returning what did not match as JSON: `{"missing_keys": [...],
    /// "unexpected_keys": [...], "tied_keys": [{"key": ..., "loaded_into": ...}]}` (empty lists when the file
    /// matched the model exactly).
    pub fn load_checkpoint_with_report(&mut self, path: &str, options: Option<&str>) -> Result<String> {
        let path = cstring("path", path)?;
        let options = opt_cstring("options_json", options)?;
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_model_load_checkpoint_with_report(self.raw, path.as_ptr(), opt_ptr(&options), &mut out) })?;
        Ok(unsafe { owned_string(out) })
    }

    /// A model from a Hugging Face folder (transformers' `from_pretrained`, no download): `config.json`'s
    /// `model_type` (gpt2, llama, mistral, qwen2) picks the model, the weights come from `model.safetensors`,
    /// shards with `model.safetensors.index.json`, or `pytorch_model.bin`. `options`, e.g. `{"strict": false,
    /// "torch_dtype": "bfloat16"}`.
    pub fn from_pretrained(path: &str, options: Option<&str>) -> Result<Model> {
        check_abi()?;
        let path = cstring("path", path)?;
        let options = opt_cstring("options_json", options)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_from_pretrained(path.as_ptr(), opt_ptr(&options), &mut raw) })?;
        Ok(Model { raw })
    }

    /// [`Model::from_pretrained`], also returning what did not match as JSON (`{"missing_keys": [...],
    /// "unexpected_keys": [...], "tied_keys": [...]}`; with `{"strict": false}`).
    pub fn from_pretrained_with_report(path: &str, options: Option<&str>) -> Result<(Model, String)> {
        check_abi()?;
        let path = cstring("path", path)?;
        let options = opt_cstring("options_json", options)?;
        let mut raw = ptr::null_mut();
        let mut out: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_model_from_pretrained_with_report(path.as_ptr(), opt_ptr(&options), &mut raw, &mut out) })?;
        Ok((Model { raw }, unsafe { owned_string(out) }))
    }

    /// Write a Hugging Face folder (`config.json` and safetensors, sharded by `max_shard_size` with the
    /// index) that transformers' `from_pretrained` loads. A prepared model is gathered on the main process:
    /// every process calls this. `options`, e.g. `{"max_shard_size": "200MB"}`.
    pub fn save_pretrained(&mut self, path: &str, options: Option<&str>) -> Result<()> {
        let path = cstring("path", path)?;
        let options = opt_cstring("options_json", options)?;
        check(unsafe { sys::accel_model_save_pretrained(self.raw, path.as_ptr(), opt_ptr(&options)) })
    }
}
