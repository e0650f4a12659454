//! Datasets written in Rust (accel/dataloader.h): a map-style dataset as a closure `index -> Sample`, an
//! iterable one as an [`IterableDataset`], and an optional collate closure. The loader owns them; an
//! `Err` (or a panic) in a callback fails `next_batch` with its status and message.
//!
//! Threads: with `"num_workers" > 0` the map closure and the collate run on the loader's worker threads,
//! several at once (hence `Fn + Send + Sync`); an iterable dataset is used from one thread at a time.
use crate::{check, cstring, sys, Batch, DataLoader, Error, Result, Status, Tensor};
use std::ffi::{c_void, CString};
use std::ptr;

/// One sample (or, from a collate, one batch): its inputs and optional labels.
pub struct Sample {
    pub inputs: Tensor,
    pub labels: Option<Tensor>,
}

/// A collated batch from a collate closure: the samples along dimension 0.
pub struct Collated {
    pub inputs: Tensor,
    pub labels: Option<Tensor>,
    pub attention_mask: Option<Tensor>,
}

/// The samples a collate closure is given: `(inputs, labels)`, borrowed for the call.
pub struct SampleRef<'a> {
    pub inputs: &'a Tensor,
    pub labels: Option<&'a Tensor>,
}

/// A stream of samples (PyTorch's IterableDataset, torchdata's Stateful).
pub trait IterableDataset: Send {
    /// Starts pass `epoch`.
    fn set_epoch(&mut self, epoch: i64) -> Result<()>;
    /// The next sample, or None at the end of the pass.
    fn next(&mut self) -> Result<Option<Sample>>;
    /// Whether `state` / `load_state` save and restore the position (for save_state / load_state).
    fn stateful(&self) -> bool {
        false
    }
    fn state(&mut self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
    fn load_state(&mut self, _state: &[u8]) -> Result<()> {
        Ok(())
    }
}

type GetFn = dyn Fn(i64) -> Result<Sample> + Send + Sync;
type CollateFn = dyn for<'a> Fn(&[SampleRef<'a>]) -> Result<Collated> + Send + Sync;

// The library owns these (released with the last loader sharing the dataset); the collate closure lives
// here too, since every loader that calls it shares the dataset.
struct MapBox {
    len: i64,
    get: Box<GetFn>,
    _collate: KeptCollate,
}

struct IterBox {
    dataset: Box<dyn IterableDataset>,
    state: Vec<u8>, // valid until the next callback
    _collate: KeptCollate,
}

/// The status of a callback's result: an error's message goes to accel_callback_set_error.
fn status_of(r: std::thread::Result<Result<()>>) -> sys::accel_status_t {
    callback_status(r, "a panic in a dataset callback")
}

/// The status of any callback's result (`panic_text` is the message of a panic): an error's message goes to
/// accel_callback_set_error.
pub(crate) fn callback_status(r: std::thread::Result<Result<()>>, panic_text: &str) -> sys::accel_status_t {
    let (status, message) = match r {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => (e.status().code(), e.message().to_string()),
        Err(_) => (Status::Unknown.code(), panic_text.to_string()),
    };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    unsafe { sys::accel_callback_set_error(text.as_ptr()) };
    status
}

fn call(f: impl FnOnce() -> Result<()>) -> sys::accel_status_t {
    status_of(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
}

/// Gives a tensor's handle to the library.
fn release(t: Tensor) -> *mut sys::accel_tensor_t {
    let raw = t.raw;
    std::mem::forget(t);
    raw
}

unsafe fn hand_over(s: Sample, inputs: *mut *mut sys::accel_tensor_t, labels: *mut *mut sys::accel_tensor_t) {
    *inputs = release(s.inputs);
    if let Some(l) = s.labels {
        *labels = release(l);
    }
}

unsafe extern "C" fn map_length(ud: *mut c_void, out: *mut i64) -> sys::accel_status_t {
    *out = (*(ud as *const MapBox)).len;
    0
}

unsafe extern "C" fn map_get(
    ud: *mut c_void,
    index: i64,
    inputs: *mut *mut sys::accel_tensor_t,
    labels: *mut *mut sys::accel_tensor_t,
) -> sys::accel_status_t {
    let b = &*(ud as *const MapBox);
    call(|| {
        let s = (b.get)(index)?;
        hand_over(s, inputs, labels);
        Ok(())
    })
}

unsafe extern "C" fn map_release(ud: *mut c_void) {
    drop(Box::from_raw(ud as *mut MapBox));
}

unsafe extern "C" fn iter_set_epoch(ud: *mut c_void, epoch: i64) -> sys::accel_status_t {
    let b = &mut *(ud as *mut IterBox);
    call(|| b.dataset.set_epoch(epoch))
}

unsafe extern "C" fn iter_next(
    ud: *mut c_void,
    inputs: *mut *mut sys::accel_tensor_t,
    labels: *mut *mut sys::accel_tensor_t,
) -> sys::accel_status_t {
    let b = &mut *(ud as *mut IterBox);
    call(|| {
        if let Some(s) = b.dataset.next()? {
            hand_over(s, inputs, labels);
        }
        Ok(())
    })
}

unsafe extern "C" fn iter_state(ud: *mut c_void, data: *mut *const u8, len: *mut usize) -> sys::accel_status_t {
    let b = &mut *(ud as *mut IterBox);
    call(|| {
        b.state = b.dataset.state()?;
        *data = b.state.as_ptr();
        *len = b.state.len();
        Ok(())
    })
}

unsafe extern "C" fn iter_load_state(ud: *mut c_void, data: *const u8, len: usize) -> sys::accel_status_t {
    let b = &mut *(ud as *mut IterBox);
    let state = if len == 0 { &[][..] } else { std::slice::from_raw_parts(data, len) };
    call(|| b.dataset.load_state(state))
}

unsafe extern "C" fn iter_release(ud: *mut c_void) {
    drop(Box::from_raw(ud as *mut IterBox));
}

unsafe extern "C" fn collate_trampoline(
    ud: *mut c_void,
    inputs: *const *const sys::accel_tensor_t,
    labels: *const *const sys::accel_tensor_t,
    count: usize,
    out_inputs: *mut *mut sys::accel_tensor_t,
    out_labels: *mut *mut sys::accel_tensor_t,
    out_mask: *mut *mut sys::accel_tensor_t,
) -> sys::accel_status_t {
    let f = &*(ud as *const Box<CollateFn>);
    call(|| {
        // Borrowed handles viewed as Tensors that must not be freed here (ManuallyDrop).
        let views: Vec<(std::mem::ManuallyDrop<Tensor>, Option<std::mem::ManuallyDrop<Tensor>>)> = (0..count)
            .map(|i| {
                let x = std::mem::ManuallyDrop::new(Tensor { raw: *inputs.add(i) as *mut _ });
                let l = if labels.is_null() || (*labels.add(i)).is_null() {
                    None
                } else {
                    Some(std::mem::ManuallyDrop::new(Tensor { raw: *labels.add(i) as *mut _ }))
                };
                (x, l)
            })
            .collect();
        let samples: Vec<SampleRef<'_>> =
            views.iter().map(|(x, l)| SampleRef { inputs: &**x, labels: l.as_ref().map(|t| &**t) }).collect();
        let c = f(&samples)?;
        *out_inputs = release(c.inputs);
        if let Some(l) = c.labels {
            *out_labels = release(l);
        }
        if let Some(m) = c.attention_mask {
            *out_mask = release(m);
        }
        Ok(())
    })
}

type KeptCollate = Option<Box<Box<CollateFn>>>;

fn collate_parts(collate: &mut KeptCollate) -> (sys::accel_collate_fn_t, *mut c_void) {
    match collate {
        Some(b) => (Some(collate_trampoline), &mut **b as *mut Box<CollateFn> as *mut c_void),
        None => (None, ptr::null_mut()),
    }
}

fn boxed_collate<C>(collate: Option<C>) -> KeptCollate
where
    C: for<'a> Fn(&[SampleRef<'a>]) -> Result<Collated> + Send + Sync + 'static,
{
    collate.map(|c| Box::new(Box::new(c) as Box<CollateFn>))
}

/// No collate closure: `None::<NoCollate>`.
pub type NoCollate = fn(&[SampleRef<'_>]) -> Result<Collated>;

impl DataLoader {
    /// A loader over a map-style dataset of `len` samples read by `get(index)` (PyTorch's Dataset), with the
    /// tensor loader's keys plus `"num_workers"`, `"prefetch_factor"`, `"collate"` (`"stack"` | `"pad"`),
    /// `"pad_token_id"`, `"label_pad_token_id"`, `"causal_lm"`; `collate` replaces the config's.
    pub fn from_map_dataset<F, C>(len: i64, get: F, collate: Option<C>, config: &str) -> Result<DataLoader>
    where
        F: Fn(i64) -> Result<Sample> + Send + Sync + 'static,
        C: for<'a> Fn(&[SampleRef<'a>]) -> Result<Collated> + Send + Sync + 'static,
    {
        let config = cstring("config_json", config)?;
        let mut kept = boxed_collate(collate);
        let (cfn, cud) = collate_parts(&mut kept);
        let user = Box::into_raw(Box::new(MapBox { len, get: Box::new(get), _collate: kept }));
        let d = sys::accel_map_dataset_t {
            length: Some(map_length),
            get: Some(map_get),
            release: Some(map_release),
            user_data: user as *mut c_void,
        };
        let mut raw = ptr::null_mut();
        let st = unsafe { sys::accel_dataloader_create_from_map_dataset(&d, cfn, cud, config.as_ptr(), &mut raw) };
        if st != 0 {
            drop(unsafe { Box::from_raw(user) }); // on failure the caller keeps user_data
        }
        check(st)?;
        Ok(DataLoader { raw })
    }

    /// A loader over an iterable dataset (batches of consecutive samples; sharded or dispatched across
    /// processes once prepared; resumed with its state when `stateful()`).
    pub fn from_iterable_dataset<D, C>(dataset: D, collate: Option<C>, config: &str) -> Result<DataLoader>
    where
        D: IterableDataset + 'static,
        C: for<'a> Fn(&[SampleRef<'a>]) -> Result<Collated> + Send + Sync + 'static,
    {
        let config = cstring("config_json", config)?;
        let mut kept = boxed_collate(collate);
        let (cfn, cud) = collate_parts(&mut kept);
        let stateful = dataset.stateful();
        let user = Box::into_raw(Box::new(IterBox { dataset: Box::new(dataset), state: Vec::new(), _collate: kept }));
        let d = sys::accel_iterable_dataset_t {
            set_epoch: Some(iter_set_epoch),
            next: Some(iter_next),
            state: if stateful { Some(iter_state) } else { None },
            load_state: if stateful { Some(iter_load_state) } else { None },
            release: Some(iter_release),
            user_data: user as *mut c_void,
        };
        let mut raw = ptr::null_mut();
        let st = unsafe { sys::accel_dataloader_create_from_iterable_dataset(&d, cfn, cud, config.as_ptr(), &mut raw) };
        if st != 0 {
            drop(unsafe { Box::from_raw(user) });
        }
        check(st)?;
        Ok(DataLoader { raw })
    }
}

impl Batch {
    /// The attention mask (1 = token, 0 = padding) of a `"pad"` collate or a collate closure, if any.
    pub fn attention_mask(&self) -> Result<Option<Tensor>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::accel_batch_get_attention_mask(self.raw, &mut raw) })?;
        Ok(if raw.is_null() { None } else { Some(Tensor { raw }) })
    }
}

/// An error for a callback to return: `Err(dataset_error("row 7 is missing"))`.
pub fn dataset_error(message: impl Into<String>) -> Error {
    Error::new(Status::Unknown, message)
}
