//! Hugging Face Accelerate's training loop for Rust, over libaccel's C API.
//!
//! ```no_run
//! use accel::{Accelerator, DataLoader, Model, Optimizer, Tensor};
//! # fn main() -> accel::Result<()> {
//! let mut acc = Accelerator::new(Some(r#"{"gradient_accumulation_steps": 2}"#))?;
//! let mut model = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 3]}"#)?;
//! let mut opt = Optimizer::new(&mut model, r#"{"type": "sgd", "lr": 0.1}"#)?;
//! let x = Tensor::from_slice(&[0.5f32; 16], &[4, 4])?;
//! let y = Tensor::from_slice(&[0i64, 1, 2, 0], &[4])?;
//! let mut dl = DataLoader::new(&x, Some(&y), r#"{"batch_size": 2}"#)?;
//! acc.prepare(Some(&mut model), Some(&mut opt), Some(&mut dl), None)?;
//! while let Some(batch) = dl.next_batch()? {
//!     let loss = acc.train_step(&mut model, &mut opt, None, &batch, "cross_entropy")?;
//!     println!("loss {loss}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Every fallible call returns [`Result`]; the [`Error`] carries the [`Status`] and the library's message
//! (which names the argument or the JSON path). Handles are freed by `Drop`, in any order: objects an
//! accelerator prepared keep its state alive. The scoped `accumulate` context is a guard that borrows the
//! accelerator mutably and ends the context when dropped; borrowed strings (parameter names)
//! borrow the model they come from.

use accel_sys as sys;
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_char;
use std::ptr;

mod big_modeling;
mod checkpoint;
mod datasets;
mod dispatch;
pub mod log;
mod memory;
mod distributed;
mod precision;
mod save;
mod state_hooks;
mod state_dict;
mod tracking;
pub use memory::find_executable_batch_size;
pub use state_hooks::{StateHookFn, StateHookHandle};
pub use tracking::{TrackerEvent, TrackerFn};
pub use datasets::{dataset_error, Collated, IterableDataset, NoCollate, Sample, SampleRef};
pub use distributed::{process_is_local_main, process_local_count, process_local_index, Scope};

/// The ABI version these declarations were generated for; checked against the loaded library by
/// [`check_abi`], which every constructor calls once.
pub const BUILT_ABI_VERSION: u32 = sys::ACCEL_ABI_VERSION;

/// A non-zero `accel_status_t`. Unknown future codes are `Other(code)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Other(i32),
}

impl Status {
    pub fn from_code(code: i32) -> Status {
        match code {
            1 => Status::Cancelled,
            2 => Status::Unknown,
            3 => Status::InvalidArgument,
            4 => Status::DeadlineExceeded,
            5 => Status::NotFound,
            6 => Status::AlreadyExists,
            7 => Status::PermissionDenied,
            8 => Status::ResourceExhausted,
            9 => Status::FailedPrecondition,
            10 => Status::Aborted,
            11 => Status::OutOfRange,
            12 => Status::Unimplemented,
            13 => Status::Internal,
            14 => Status::Unavailable,
            15 => Status::DataLoss,
            c => Status::Other(c),
        }
    }

    pub fn code(self) -> i32 {
        match self {
            Status::Cancelled => 1,
            Status::Unknown => 2,
            Status::InvalidArgument => 3,
            Status::DeadlineExceeded => 4,
            Status::NotFound => 5,
            Status::AlreadyExists => 6,
            Status::PermissionDenied => 7,
            Status::ResourceExhausted => 8,
            Status::FailedPrecondition => 9,
            Status::Aborted => 10,
            Status::OutOfRange => 11,
            Status::Unimplemented => 12,
            Status::Internal => 13,
            Status::Unavailable => 14,
            Status::DataLoss => 15,
            Status::Other(c) => c,
        }
    }

    /// The library's name for the status, e.g. "ACCEL_ERR_INVALID_ARGUMENT".
    pub fn name(self) -> &'static str {
        // accel_status_name returns static storage.
        unsafe { CStr::from_ptr(sys::accel_status_name(self.code())) }.to_str().unwrap_or("ACCEL_ERR_UNRECOGNIZED")
    }
}

/// A failed call: the status and the message of `accel_last_error_message()`, copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(status: sys::accel_status_t) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    let msg = unsafe { CStr::from_ptr(sys::accel_last_error_message()) }.to_string_lossy().into_owned();
    Err(Error::new(Status::from_code(status), msg))
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(Status::InvalidArgument, format!("{what}: contains a NUL byte")))
}

fn opt_cstring(what: &str, s: Option<&str>) -> Result<Option<CString>> {
    s.map(|s| cstring(what, s)).transpose()
}

fn opt_ptr(s: &Option<CString>) -> *const c_char {
    s.as_ref().map_or(ptr::null(), |c| c.as_ptr())
}

/// Fails with a clear message when the loaded libaccel has another ABI than these declarations.
pub fn check_abi() -> Result<()> {
    let loaded = unsafe { sys::accel_abi_version() };
    if loaded as u32 != BUILT_ABI_VERSION {
        return Err(Error::new(
            Status::FailedPrecondition,
            format!(
                "the loaded libaccel has ABI version {loaded} but the accel crate was built for ABI {BUILT_ABI_VERSION} (libaccel.so.{BUILT_ABI_VERSION})"
            ),
        ));
    }
    Ok(())
}

/// Version of the loaded library, e.g. "0.1.0".
pub fn version_string() -> &'static str {
    unsafe { CStr::from_ptr(sys::accel_version_string()) }.to_str().unwrap_or("")
}

/// ACCEL_VERSION_NUMBER of the loaded library (major*1000000 + minor*1000 + patch).
pub fn version_number() -> i32 {
    unsafe { sys::accel_version_number() }
}

/// Rank of this process as the launcher's environment says (0 when not launched); no accelerator needed.
pub fn process_index() -> Result<i32> {
    let mut v = 0;
    check(unsafe { sys::accel_process_get_index(&mut v) })?;
    Ok(v)
}

/// Number of processes as the launcher's environment says (1 when not launched).
pub fn process_count() -> Result<i32> {
    let mut v = 0;
    check(unsafe { sys::accel_process_get_count(&mut v) })?;
    Ok(v)
}

/// Whether this process is rank 0, from the launcher's environment.
pub fn process_is_main() -> Result<bool> {
    let mut v = false;
    check(unsafe { sys::accel_process_is_main(&mut v) })?;
    Ok(v)
}

/// ABI version of the loaded library.
pub fn abi_version() -> i32 {
    unsafe { sys::accel_abi_version() }
}

/// Seed LibTorch's default generator and the library's, as `accelerate.utils.set_seed`.
pub fn set_seed(seed: u64, device_specific: bool, deterministic: bool) -> Result<()> {
    check(unsafe { sys::accel_random_set_seed(seed, device_specific, deterministic) })
}

/// Join sharded weights (save_model shards with an index, or a SHARDED_STATE_DICT checkpoint) into one file,
/// as accelerate.utils.merge_fsdp_weights; `options` e.g. `{"safe_serialization": false}`. Returns the file
/// written and the number of tensors.
pub fn merge_weights(checkpoint_dir: &str, output_path: &str, options: Option<&str>) -> Result<(String, i64)> {
    let dir = cstring("checkpoint_dir", checkpoint_dir)?;
    let out = cstring("output_path", output_path)?;
    let options = opt_cstring("options_json", options)?;
    let mut path: *mut c_char = ptr::null_mut();
    let mut count: i64 = 0;
    check(unsafe {
        sys::accel_checkpoint_merge_weights(dir.as_ptr(), out.as_ptr(), opt_ptr(&options), &mut path, &mut count)
    })?;
    Ok((unsafe { owned_string(path) }, count))
}

/// Build facts (versions, CUDA, backends) as JSON.
pub fn build_info_json() -> Result<String> {
    let mut s: *mut c_char = ptr::null_mut();
    check(unsafe { sys::accel_build_info_json(&mut s) })?;
    Ok(unsafe { owned_string(s) })
}

unsafe fn owned_string(s: *mut c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    let out = CStr::from_ptr(s).to_string_lossy().into_owned();
    sys::accel_string_free(s);
    out
}

macro_rules! handle {
    ($name:ident, $raw:ty, $free:path, $doc:expr) => {
        #[doc = $doc]
        ///
        /// Freed on drop. May be moved to another thread, but not shared between threads.
        pub struct $name {
            raw: *mut $raw,
        }

        impl $name {
            /// The C handle, for calls through `accel_sys`. Stays owned by `self`.
            pub fn as_ptr(&self) -> *mut $raw {
                self.raw
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                unsafe { $free(self.raw) }
            }
        }

        // The library allows moving a handle between threads, not using it from two at once.
        unsafe impl Send for $name {}
    };
}

/// Accelerate's `Accelerator`.
///
/// Freed on drop (then the tracker closures it holds). May be moved to another thread, but not shared
/// between threads.
pub struct Accelerator {
    raw: *mut sys::accel_accelerator_t,
    // Closures added with add_tracker: the library borrows them (the address of each inner box, which
    // the outer box keeps in place) until the accelerator is freed.
    #[allow(clippy::vec_box)]
    trackers: Vec<Box<Box<tracking::TrackerFn>>>,
}

impl Accelerator {
    /// The C handle, for calls through `accel_sys`. Stays owned by `self`.
    pub fn as_ptr(&self) -> *mut sys::accel_accelerator_t {
        self.raw
    }
}

impl Drop for Accelerator {
    fn drop(&mut self) {
        unsafe { sys::accel_accelerator_free(self.raw) }
    }
}

unsafe impl Send for Accelerator {}
handle!(Model, sys::accel_model_t, sys::accel_model_free, "A model from a JSON spec or TorchScript.");
handle!(Optimizer, sys::accel_optimizer_t, sys::accel_optimizer_free, "An optimizer over a model's parameters.");
handle!(Scheduler, sys::accel_scheduler_t, sys::accel_scheduler_free, "A learning-rate scheduler.");
handle!(DataLoader, sys::accel_dataloader_t, sys::accel_dataloader_free, "A data loader over tensors.");
handle!(Batch, sys::accel_batch_t, sys::accel_batch_free, "One batch: inputs and optional labels.");
handle!(Tensor, sys::accel_tensor_t, sys::accel_tensor_free, "A CPU tensor owned by the library.");

/// Element types a [`Tensor`] can be built from or read into.
pub trait Element: Copy + Default {
    /// The `ACCEL_DTYPE_*` value.
    const DTYPE: sys::accel_dtype_t;
    /// `v` as this type; called only where [`converts_exactly`] holds, so the cast is exact.
    fn from_exact(v: f64) -> Self;
}
impl Element for f32 {
    const DTYPE: sys::accel_dtype_t = sys::accel_dtype_enum_ACCEL_DTYPE_FLOAT32 as sys::accel_dtype_t;
    fn from_exact(v: f64) -> Self {
        v as f32
    }
}
impl Element for f64 {
    const DTYPE: sys::accel_dtype_t = sys::accel_dtype_enum_ACCEL_DTYPE_FLOAT64 as sys::accel_dtype_t;
    fn from_exact(v: f64) -> Self {
        v
    }
}
impl Element for i32 {
    const DTYPE: sys::accel_dtype_t = sys::accel_dtype_enum_ACCEL_DTYPE_INT32 as sys::accel_dtype_t;
    fn from_exact(v: f64) -> Self {
        v as i32
    }
}
impl Element for i64 {
    const DTYPE: sys::accel_dtype_t = sys::accel_dtype_enum_ACCEL_DTYPE_INT64 as sys::accel_dtype_t;
    fn from_exact(v: f64) -> Self {
        v as i64
    }
}
impl Element for u8 {
    const DTYPE: sys::accel_dtype_t = sys::accel_dtype_enum_ACCEL_DTYPE_UINT8 as sys::accel_dtype_t;
    fn from_exact(v: f64) -> Self {
        v as u8
    }
}

/// The `ACCEL_DTYPE_*` values, as the `sys` enum's constants.
pub mod dtype {
    use accel_sys as sys;
    pub const FLOAT32: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_FLOAT32 as i32;
    pub const FLOAT64: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_FLOAT64 as i32;
    pub const FLOAT16: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_FLOAT16 as i32;
    pub const BFLOAT16: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_BFLOAT16 as i32;
    pub const INT8: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_INT8 as i32;
    pub const UINT8: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_UINT8 as i32;
    pub const INT16: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_INT16 as i32;
    pub const INT32: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_INT32 as i32;
    pub const INT64: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_INT64 as i32;
    pub const BOOL: i32 = sys::accel_dtype_enum_ACCEL_DTYPE_BOOL as i32;

    /// The dtype as numpy and torch spell it ("float32"), or "dtype N" for a value this crate does not know.
    pub fn name(dtype: i32) -> String {
        match dtype {
            FLOAT32 => "float32",
            FLOAT64 => "float64",
            FLOAT16 => "float16",
            BFLOAT16 => "bfloat16",
            INT8 => "int8",
            UINT8 => "uint8",
            INT16 => "int16",
            INT32 => "int32",
            INT64 => "int64",
            BOOL => "bool",
            _ => return format!("dtype {dtype}"),
        }
        .to_string()
    }
}

/// Whether every value of dtype `from` is exact in dtype `to`: the typed accessors' rule in every binding
/// (numpy's "safe" casting less int64 -> float64, which rounds above 2**53; float16, bfloat16 and bool are
/// read only as themselves). The same table as bindings/swig/dtypes.i.
pub fn converts_exactly(from: i32, to: i32) -> bool {
    use dtype::*;
    if from == to {
        return true;
    }
    let small_int = matches!(from, BOOL | UINT8 | INT8);
    match to {
        FLOAT64 => small_int || matches!(from, INT16 | INT32 | FLOAT16 | BFLOAT16 | FLOAT32),
        FLOAT32 => small_int || matches!(from, INT16 | FLOAT16 | BFLOAT16), // 24-bit significand: no int32
        INT64 => small_int || matches!(from, INT16 | INT32),
        INT32 => small_int || from == INT16,
        INT16 => small_int,
        INT8 | UINT8 => from == BOOL,
        _ => false,
    }
}

/// IEEE half -> f32 (subnormals, infinities and NaN included).
fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let (exp, mant) = ((h >> 10) & 0x1f, u32::from(h & 0x3ff));
    match exp {
        0 => sign * mant as f32 * (1.0 / 16_777_216.0), // mant * 2^-24
        31 => f32::from_bits((u32::from(h & 0x8000) << 16) | 0x7f80_0000 | (mant << 13)),
        _ => f32::from_bits((u32::from(h & 0x8000) << 16) | ((u32::from(exp) + 112) << 23) | (mant << 13)),
    }
}

/// Element `i` of raw native-endian bytes of `dtype` as f64 (exact for every source `converts_exactly` takes).
fn load_element(dtype: i32, raw: &[u8], i: usize) -> f64 {
    let b = |n: usize| &raw[i * n..(i + 1) * n];
    match dtype {
        dtype::FLOAT32 => f64::from(f32::from_ne_bytes(b(4).try_into().unwrap())),
        dtype::FLOAT16 => f64::from(half_to_f32(u16::from_ne_bytes(b(2).try_into().unwrap()))),
        dtype::BFLOAT16 => f64::from(f32::from_bits(u32::from(u16::from_ne_bytes(b(2).try_into().unwrap())) << 16)),
        dtype::INT8 => f64::from(raw[i] as i8),
        dtype::UINT8 => f64::from(raw[i]),
        dtype::BOOL => f64::from(u8::from(raw[i] != 0)),
        dtype::INT16 => f64::from(i16::from_ne_bytes(b(2).try_into().unwrap())),
        dtype::INT32 => f64::from(i32::from_ne_bytes(b(4).try_into().unwrap())),
        _ => 0.0, // float64 and int64 never convert (same-dtype reads copy the bytes)
    }
}

impl Tensor {
    /// A tensor holding a copy of `data` with `shape` (row-major; product(shape) == data.len()).
    pub fn from_slice<T: Element>(data: &[T], shape: &[i64]) -> Result<Tensor> {
        check_abi()?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::accel_tensor_create(
                data.as_ptr().cast(),
                std::mem::size_of_val(data),
                T::DTYPE,
                shape.as_ptr(),
                shape.len(),
                &mut raw,
            )
        })?;
        Ok(Tensor { raw })
    }

    /// A tensor of `dtype` (`ACCEL_DTYPE_*`) from raw row-major bytes.
    pub fn from_bytes(data: &[u8], dtype: i32, shape: &[i64]) -> Result<Tensor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_tensor_create(data.as_ptr().cast(), data.len(), dtype, shape.as_ptr(), shape.len(), &mut raw) })?;
        Ok(Tensor { raw })
    }

    /// Where the elements live: "cpu", "cuda:0", ...
    pub fn device(&self) -> Result<String> {
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_tensor_get_device(self.raw, &mut s) })?;
        Ok(unsafe { owned_string(s) })
    }

    pub fn dtype(&self) -> Result<i32> {
        let mut v = 0;
        check(unsafe { sys::accel_tensor_get_dtype(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut nd = 0usize;
        check(unsafe { sys::accel_tensor_get_ndim(self.raw, &mut nd) })?;
        let mut s = vec![0i64; nd];
        check(unsafe { sys::accel_tensor_get_shape(self.raw, s.as_mut_ptr(), nd) })?;
        Ok(s)
    }

    /// Size of the elements in bytes (numel * element size).
    pub fn nbytes(&self) -> Result<usize> {
        let mut v = 0usize;
        check(unsafe { sys::accel_tensor_get_nbytes(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn numel(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::accel_tensor_get_numel(self.raw, &mut v) })?;
        Ok(v)
    }

    /// The elements, copied, as `T`: converted where every value of the tensor's dtype is exact in `T`
    /// ([`converts_exactly`]: an int32 tensor reads as `i32`, `i64` or `f64`, not `f32`), otherwise
    /// `Status::InvalidArgument` naming both dtypes.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let from = self.dtype()?;
        if !converts_exactly(from, T::DTYPE) {
            let (f, t) = (dtype::name(from), dtype::name(T::DTYPE));
            let ok: Vec<String> = [dtype::FLOAT32, dtype::FLOAT64, dtype::INT32, dtype::INT64, dtype::UINT8]
                .into_iter()
                .filter(|&d| converts_exactly(from, d))
                .map(dtype::name)
                .collect();
            let ok = if ok.is_empty() { "none (read the raw bytes)".to_string() } else { ok.join(", ") };
            return Err(Error::new(
                Status::InvalidArgument,
                format!("to_vec: the tensor's dtype is {f}, and {t} cannot hold every {f} value exactly; read it as {ok}"),
            ));
        }
        let n = self.numel()? as usize;
        if from == T::DTYPE {
            let mut v = vec![T::default(); n];
            check(unsafe { sys::accel_tensor_copy_to_buffer(self.raw, v.as_mut_ptr().cast(), std::mem::size_of_val(&v[..])) })?;
            return Ok(v);
        }
        let mut size = 0usize;
        check(unsafe { sys::accel_dtype_get_size(from, &mut size) })?;
        let mut raw = vec![0u8; n * size];
        check(unsafe { sys::accel_tensor_copy_to_buffer(self.raw, raw.as_mut_ptr().cast(), raw.len()) })?;
        Ok((0..n).map(|i| T::from_exact(load_element(from, &raw, i))).collect())
    }

    /// The value of a one-element tensor.
    pub fn item(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::accel_tensor_get_item(self.raw, &mut v) })?;
        Ok(v)
    }
}

/// A mean-reduced loss by name ("cross_entropy", "mse", ...), keeping the graph for backward.
pub fn compute_loss(name: &str, outputs: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let name = cstring("name", name)?;
    let mut raw = ptr::null_mut();
    check(unsafe { sys::accel_loss_compute(name.as_ptr(), outputs.raw, targets.raw, &mut raw) })?;
    Ok(Tensor { raw })
}

impl Model {
    /// A model from a JSON spec, e.g. `{"type": "mlp", "widths": [16, 64, 4]}`.
    pub fn from_json(spec: &str) -> Result<Model> {
        check_abi()?;
        let spec = cstring("spec_json", spec)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_create_from_json(spec.as_ptr(), &mut raw) })?;
        Ok(Model { raw })
    }

    /// A TorchScript module saved with `torch.jit.save`.
    pub fn from_torchscript(path: &str) -> Result<Model> {
        check_abi()?;
        let path = cstring("path", path)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_create_from_torchscript(path.as_ptr(), &mut raw) })?;
        Ok(Model { raw })
    }

    pub fn forward(&mut self, input: &Tensor) -> Result<Tensor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_forward(self.raw, input.raw, &mut raw) })?;
        Ok(Tensor { raw })
    }

    /// [`Model::forward`] without the autograd graph, as under `torch.no_grad()`: evaluation and inference
    /// (eval mode alone keeps the graph, as in PyTorch).
    pub fn forward_no_grad(&mut self, input: &Tensor) -> Result<Tensor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_forward_no_grad(self.raw, input.raw, &mut raw) })?;
        Ok(Tensor { raw })
    }

    pub fn train(&mut self) -> Result<()> {
        check(unsafe { sys::accel_model_train(self.raw) })
    }

    pub fn eval(&mut self) -> Result<()> {
        check(unsafe { sys::accel_model_eval(self.raw) })
    }

    /// Whether the model is in training mode (model.training).
    pub fn is_training(&self) -> Result<bool> {
        let mut v = false;
        check(unsafe { sys::accel_model_is_training(self.raw, &mut v) })?;
        Ok(v)
    }

    /// Total number of parameter elements.
    pub fn parameter_numel(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::accel_model_get_parameter_numel(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn num_parameters(&self) -> Result<usize> {
        let mut v = 0usize;
        check(unsafe { sys::accel_model_get_num_parameters(self.raw, &mut v) })?;
        Ok(v)
    }

    /// Name of parameter `index`; borrowed from the model (the library keeps it until the model is freed).
    pub fn parameter_name(&self, index: usize) -> Result<&str> {
        let mut s: *const c_char = ptr::null();
        check(unsafe { sys::accel_model_get_parameter_name(self.raw, index, &mut s) })?;
        unsafe { CStr::from_ptr(s) }
            .to_str()
            .map_err(|_| Error::new(Status::Internal, "parameter name is not UTF-8"))
    }

    /// A copy of the parameter or buffer `name`.
    pub fn get_tensor(&self, name: &str) -> Result<Tensor> {
        let name = cstring("name", name)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_get_tensor(self.raw, name.as_ptr(), &mut raw) })?;
        Ok(Tensor { raw })
    }

    /// Tokens generated by a "gpt" or "llama" model after the prompt `input_ids` (int64, `[B, T]` or `[T]`): the prompt
    /// followed by the new tokens, same rank. Options (None: greedy, 20 new tokens): `{"max_new_tokens": 20,
    /// "do_sample": false, "temperature": 1.0, "top_k": 50, "seed": 42, "eos_token_id": null, "use_cache": true}`.
    pub fn generate(&mut self, input_ids: &Tensor, options: Option<&str>) -> Result<Tensor> {
        let options = opt_cstring("options_json", options)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_generate(self.raw, input_ids.raw, opt_ptr(&options), &mut raw) })?;
        Ok(Tensor { raw })
    }

    /// A copy of the gradient of `name`, or None when it has none.
    pub fn get_gradient(&self, name: &str) -> Result<Option<Tensor>> {
        let name = cstring("name", name)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_model_get_gradient(self.raw, name.as_ptr(), &mut raw) })?;
        Ok(if raw.is_null() { None } else { Some(Tensor { raw }) })
    }

    /// Freezes (`false`) or unfreezes (`true`) every parameter whose name matches the glob `name_glob` (`*`
    /// matches any characters): frozen parameters get no gradient and no optimizer state. Call it before
    /// creating the optimizer (afterwards: FailedPrecondition).
    pub fn set_requires_grad(&mut self, name_glob: &str, requires_grad: bool) -> Result<()> {
        let name_glob = cstring("name_glob", name_glob)?;
        check(unsafe { sys::accel_model_set_requires_grad(self.raw, name_glob.as_ptr(), requires_grad) })
    }

    /// Whether parameter `name` trains (false when frozen).
    pub fn requires_grad(&self, name: &str) -> Result<bool> {
        let name = cstring("name", name)?;
        let mut v = false;
        check(unsafe { sys::accel_model_get_requires_grad(self.raw, name.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Quantizes the linear layers in place with bitsandbytes' 8-bit or 4-bit formats (Accelerate's
    /// load_and_quantize_model); `bnb_config_json` holds BnbQuantizationConfig's keys. Before preparing the model.
    pub fn quantize(&mut self, bnb_config_json: &str) -> Result<()> {
        let config = cstring("bnb_config_json", bnb_config_json)?;
        check(unsafe { sys::accel_model_quantize(self.raw, config.as_ptr()) })
    }
}

impl Optimizer {
    /// An optimizer over every parameter of `model`, e.g. `{"type": "adamw", "lr": 3e-4}`.
    pub fn new(model: &mut Model, config: &str) -> Result<Optimizer> {
        let config = cstring("config_json", config)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_optimizer_create(model.raw, config.as_ptr(), &mut raw) })?;
        Ok(Optimizer { raw })
    }

    pub fn step(&mut self) -> Result<()> {
        check(unsafe { sys::accel_optimizer_step(self.raw) })
    }

    pub fn zero_grad(&mut self) -> Result<()> {
        check(unsafe { sys::accel_optimizer_zero_grad(self.raw) })
    }

    /// Whether the last step was skipped by the gradient scaler (non-finite gradients).
    pub fn step_was_skipped(&self) -> Result<bool> {
        let mut v = false;
        check(unsafe { sys::accel_optimizer_get_step_was_skipped(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn lr(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::accel_optimizer_get_lr(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        check(unsafe { sys::accel_optimizer_set_lr(self.raw, lr) })
    }
}

impl Scheduler {
    /// A scheduler for `optimizer`, e.g. `{"type": "cosine", "num_warmup_steps": 10, "num_training_steps": 100}`.
    pub fn new(optimizer: &mut Optimizer, config: &str) -> Result<Scheduler> {
        let config = cstring("config_json", config)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_scheduler_create(optimizer.raw, config.as_ptr(), &mut raw) })?;
        Ok(Scheduler { raw })
    }

    pub fn step(&mut self) -> Result<()> {
        check(unsafe { sys::accel_scheduler_step(self.raw) })
    }

    pub fn last_lr(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::accel_scheduler_get_last_lr(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn step_count(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::accel_scheduler_get_step_count(self.raw, &mut v) })?;
        Ok(v)
    }
}

impl DataLoader {
    /// A loader over `(features[i], labels[i])`; it shares the tensors' memory (the library keeps it alive).
    pub fn new(features: &Tensor, labels: Option<&Tensor>, config: &str) -> Result<DataLoader> {
        let config = cstring("config_json", config)?;
        let mut raw = ptr::null_mut();
        let labels = labels.map_or(ptr::null(), |t| t.raw as *const _);
        check(unsafe { sys::accel_dataloader_create_from_tensors(features.raw, labels, config.as_ptr(), &mut raw) })?;
        Ok(DataLoader { raw })
    }

    /// A loader over one token stream (a 1-d integer tensor) for language models: windows of
    /// `block_size + 1` tokens, inputs the first `block_size` and labels the next token of each. Config:
    /// `{"block_size": 128 (required), "stride": block_size, "batch_size": 16, "shuffle": true, "seed": 42,
    /// "drop_last": false}`. The loader shares the tensor's memory (the library keeps it alive).
    pub fn from_tokens(tokens: &Tensor, config: &str) -> Result<DataLoader> {
        let config = cstring("config_json", config)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_dataloader_create_from_tokens(tokens.raw, config.as_ptr(), &mut raw) })?;
        Ok(DataLoader { raw })
    }

    /// A loader over datasets in files, read without loading them (memory-mapped, each batch read with
    /// pread): a token stream `{"format": "tokens", "files": ["train-*.bin"], "dtype": "uint16",
    /// "block_size": 1024}` (also `"npy"` 1-d arrays, or `"safetensors"` with `"tensor"`), or samples
    /// `{"format": "npy", "features": "x.npy", "labels": "y.npy"}`; plus the loader keys.
    pub fn from_files(config: &str) -> Result<DataLoader> {
        let config = cstring("config_json", config)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_dataloader_create_from_files(config.as_ptr(), &mut raw) })?;
        Ok(DataLoader { raw })
    }

    /// The next batch of the current pass, or None at its end (the next call starts the next pass).
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_dataloader_next(self.raw, &mut raw) })?;
        Ok(if raw.is_null() { None } else { Some(Batch { raw }) })
    }

    /// One pass as an iterator of `Result<Batch>`; it borrows the loader until dropped.
    pub fn pass(&mut self) -> Pass<'_> {
        Pass { loader: self, done: false }
    }

    pub fn len(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::accel_dataloader_get_length(self.raw, &mut v) })?;
        Ok(v)
    }

    /// The epoch that seeds the next pass's shuffle.
    pub fn epoch(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::accel_dataloader_get_epoch(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn set_epoch(&mut self, epoch: i64) -> Result<()> {
        check(unsafe { sys::accel_dataloader_set_epoch(self.raw, epoch) })
    }
}

/// One pass over a [`DataLoader`] (see [`DataLoader::pass`]).
pub struct Pass<'a> {
    loader: &'a mut DataLoader,
    done: bool,
}

impl Iterator for Pass<'_> {
    type Item = Result<Batch>;
    fn next(&mut self) -> Option<Result<Batch>> {
        if self.done {
            return None;
        }
        match self.loader.next_batch() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl Batch {
    pub fn inputs(&self) -> Result<Tensor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_batch_get_inputs(self.raw, &mut raw) })?;
        Ok(Tensor { raw })
    }

    pub fn labels(&self) -> Result<Option<Tensor>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_batch_get_labels(self.raw, &mut raw) })?;
        Ok(if raw.is_null() { None } else { Some(Tensor { raw }) })
    }

    pub fn size(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::accel_batch_get_size(self.raw, &mut v) })?;
        Ok(v)
    }
}

/// The `accelerator.accumulate(model)` context: a [`Scope`] that ends accumulate() when dropped. Borrows
/// the accelerator mutably, so contexts cannot overlap; use [`Scope::accelerator`] inside it.
pub type Accumulate<'a> = Scope<'a>;

impl Accelerator {
    /// An accelerator from Accelerate's `Accelerator(...)` arguments as JSON (None: defaults). Invalid
    /// configs are `Status::InvalidArgument` naming the JSON path.
    pub fn new(config: Option<&str>) -> Result<Accelerator> {
        check_abi()?;
        let config = opt_cstring("config_json", config)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_create(opt_ptr(&config), &mut raw) })?;
        Ok(Accelerator { raw, trackers: Vec::new() })
    }

    /// The effective configuration as JSON.
    pub fn config_json(&self) -> Result<String> {
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_get_config_json(self.raw, &mut s) })?;
        Ok(unsafe { owned_string(s) })
    }

    /// `accelerator.device`: "cuda:N" where a GPU is used, else "cpu".
    pub fn device(&self) -> Result<String> {
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_get_device(self.raw, &mut s) })?;
        Ok(unsafe { owned_string(s) })
    }

    /// Prepare any of the four objects, as `accelerator.prepare(...)`.
    pub fn prepare(
        &mut self,
        model: Option<&mut Model>,
        optimizer: Option<&mut Optimizer>,
        dataloader: Option<&mut DataLoader>,
        scheduler: Option<&mut Scheduler>,
    ) -> Result<()> {
        check(unsafe {
            sys::accel_accelerator_prepare(
                self.raw,
                model.map_or(ptr::null_mut(), |m| m.raw),
                optimizer.map_or(ptr::null_mut(), |o| o.raw),
                dataloader.map_or(ptr::null_mut(), |d| d.raw),
                scheduler.map_or(ptr::null_mut(), |s| s.raw),
            )
        })
    }

    /// Accelerate's `free_memory()`: the accelerator forgets every object it prepared (they become
    /// unprepared objects again and may be prepared again) and `step` goes back to 0. Collective when a
    /// model is sharded.
    pub fn free_memory(&mut self) -> Result<()> {
        check(unsafe { sys::accel_accelerator_free_memory(self.raw) })
    }

    /// The same as [`Accelerator::free_memory`] (Accelerate's alias).
    pub fn clear(&mut self) -> Result<()> {
        check(unsafe { sys::accel_accelerator_clear(self.raw) })
    }

    /// Backpropagate `loss` divided by gradient_accumulation_steps.
    pub fn backward(&mut self, loss: &mut Tensor) -> Result<()> {
        check(unsafe { sys::accel_accelerator_backward(self.raw, loss.raw) })
    }

    /// LOMO's fused backward (`accelerator.lomo_backward(loss, learning_rate)`): every prepared `lomo` /
    /// `adalomo` optimizer updates each parameter during backward; no gradient is kept.
    pub fn lomo_backward(&mut self, loss: &mut Tensor, learning_rate: f64) -> Result<()> {
        check(unsafe { sys::accel_accelerator_lomo_backward(self.raw, loss.raw, learning_rate) })
    }

    /// A read-only property through the C API's `get_`/`is_`/`has_` shape: the value the call writes.
    pub(crate) fn query<T: Default>(
        &self,
        get: unsafe extern "C" fn(*const sys::accel_accelerator_t, *mut T) -> sys::accel_status_t,
    ) -> Result<T> {
        let mut v = T::default();
        check(unsafe { get(self.raw, &mut v) })?;
        Ok(v)
    }

    /// Enter `accumulate(model)`; the context ends when the guard is dropped.
    pub fn accumulate(&mut self, model: &mut Model) -> Result<Accumulate<'_>> {
        check(unsafe { sys::accel_accelerator_accumulate_begin(self.raw, model.raw) })?;
        Ok(Scope::new(self, sys::accel_accelerator_accumulate_end))
    }

    /// Enter `join_uneven_inputs(joinables, even_batches)` (empty `joinables`: every prepared model; `None`: the
    /// data loaders keep their even_batches); the scope ends, shadowing the others' steps, when the guard is dropped.
    pub fn join_uneven_inputs(&mut self, joinables: &mut [&mut Model], even_batches: Option<bool>) -> Result<Scope<'_>> {
        let raw: Vec<*mut sys::accel_model_t> = joinables.iter().map(|m| m.raw).collect();
        let even = even_batches.map_or(-1, i32::from);
        check(unsafe {
            sys::accel_accelerator_join_uneven_inputs_begin(self.raw, raw.as_ptr(), raw.len(), even)
        })?;
        Ok(Scope::new(self, sys::accel_accelerator_join_uneven_inputs_end))
    }

    /// One micro-step: enters accumulate(model) itself (do not call it inside an [`Accumulate`] guard), then
    /// forward, loss, backward, and the steps on sync steps. Returns the undivided loss.
    pub fn train_step(
        &mut self,
        model: &mut Model,
        optimizer: &mut Optimizer,
        scheduler: Option<&mut Scheduler>,
        batch: &Batch,
        loss_name: &str,
    ) -> Result<f64> {
        let loss_name = cstring("loss_name", loss_name)?;
        let mut v = 0.0;
        check(unsafe {
            sys::accel_accelerator_train_step(
                self.raw,
                model.raw,
                optimizer.raw,
                scheduler.map_or(ptr::null_mut(), |s| s.raw),
                batch.raw,
                loss_name.as_ptr(),
                &mut v,
            )
        })?;
        Ok(v)
    }

    pub fn sync_gradients(&self) -> Result<bool> {
        self.query(sys::accel_accelerator_get_sync_gradients)
    }

    pub fn step(&self) -> Result<i64> {
        self.query(sys::accel_accelerator_get_step)
    }

    pub fn gradient_accumulation_steps(&self) -> Result<i64> {
        self.query(sys::accel_accelerator_get_gradient_accumulation_steps)
    }

    /// Clip gradients to a total norm; returns the norm before clipping.
    pub fn clip_grad_norm(&mut self, model: &mut Model, max_norm: f64, norm_type: f64) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::accel_accelerator_clip_grad_norm(self.raw, model.raw, max_norm, norm_type, &mut v) })?;
        Ok(v)
    }

    /// Print on the main process only.
    pub fn print(&self, text: &str) -> Result<()> {
        let text = cstring("text", text)?;
        check(unsafe { sys::accel_accelerator_print(self.raw, text.as_ptr()) })
    }

    /// Save the accelerator's state into `dir` (Accelerate's layout).
    pub fn save_state(&mut self, dir: &str) -> Result<()> {
        let dir = cstring("output_dir", dir)?;
        check(unsafe { sys::accel_accelerator_save_state(self.raw, dir.as_ptr()) })
    }

    /// Load state saved by [`Accelerator::save_state`].
    pub fn load_state(&mut self, dir: &str) -> Result<()> {
        let dir = cstring("input_dir", dir)?;
        check(unsafe { sys::accel_accelerator_load_state(self.raw, dir.as_ptr()) })
    }

    pub fn is_main_process(&self) -> Result<bool> {
        self.query(sys::accel_accelerator_is_main_process)
    }

    pub fn num_processes(&self) -> Result<i32> {
        self.query(sys::accel_accelerator_get_num_processes)
    }
}
