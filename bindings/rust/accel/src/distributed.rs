//! Collectives and process facts (Accelerate's gather, reduce, broadcast, pad_across_processes,
//! split_between_processes, wait_for_everyone, main_process_first). Collectives must be called in the
//! same order on every process.
use crate::{check, cstring, sys, Accelerator, Batch, Model, Result, Tensor};
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr;

/// A `main_process_first()`, `local_main_process_first()` or `autocast()` block: ends when dropped (use
/// [`Scope::end`] to see a failure). Borrows the accelerator mutably; use [`Scope::accelerator`] inside.
pub struct Scope<'a> {
    acc: &'a mut Accelerator,
    end: unsafe extern "C" fn(*mut sys::accel_accelerator_t) -> sys::accel_status_t,
    _not_send: PhantomData<*const ()>,
}

impl<'a> Scope<'a> {
    pub(crate) fn new(
        acc: &'a mut Accelerator,
        end: unsafe extern "C" fn(*mut sys::accel_accelerator_t) -> sys::accel_status_t,
    ) -> Scope<'a> {
        Scope { acc, end, _not_send: PhantomData }
    }

    pub fn accelerator(&mut self) -> &mut Accelerator {
        self.acc
    }

    /// Ends the block now and reports a failure (Drop ignores it).
    pub fn end(self) -> Result<()> {
        let (raw, end) = (self.acc.raw, self.end);
        std::mem::forget(self);
        check(unsafe { end(raw) })
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        let _ = unsafe { (self.end)(self.acc.raw) };
    }
}

fn tensor_out(f: impl FnOnce(*mut *mut sys::accel_tensor_t) -> sys::accel_status_t) -> Result<Tensor> {
    let mut raw = ptr::null_mut();
    check(f(&mut raw))?;
    Ok(Tensor { raw })
}

impl Accelerator {
    /// `tensor` from every process, concatenated along the first dimension.
    pub fn gather(&mut self, tensor: &Tensor) -> Result<Tensor> {
        tensor_out(|out| unsafe { sys::accel_accelerator_gather(self.raw, tensor.raw, out) })
    }

    /// [`Accelerator::gather`], dropping the samples repeated to even out a prepared loader's last batch.
    pub fn gather_for_metrics(&mut self, tensor: &Tensor) -> Result<Tensor> {
        tensor_out(|out| unsafe { sys::accel_accelerator_gather_for_metrics(self.raw, tensor.raw, out) })
    }

    /// `tensor` reduced over every process: "sum", "mean", "max", "min" or "none" (sums).
    pub fn reduce(&mut self, tensor: &Tensor, reduction: &str) -> Result<Tensor> {
        let reduction = cstring("reduction", reduction)?;
        tensor_out(|out| unsafe { sys::accel_accelerator_reduce(self.raw, tensor.raw, reduction.as_ptr(), out) })
    }

    /// Overwrite `tensor` in place with process `from_process`'s copy.
    pub fn broadcast(&mut self, tensor: &mut Tensor, from_process: i32) -> Result<()> {
        check(unsafe { sys::accel_accelerator_broadcast(self.raw, tensor.raw, from_process) })
    }

    /// `tensor` padded along `dim` to the largest size any process has, with `pad_index`.
    pub fn pad_across_processes(&mut self, tensor: &Tensor, dim: i64, pad_index: f64, pad_first: bool) -> Result<Tensor> {
        tensor_out(|out| unsafe {
            sys::accel_accelerator_pad_across_processes(self.raw, tensor.raw, dim, pad_index, pad_first, out)
        })
    }

    /// This process's share of `tensor`'s rows.
    pub fn split_between_processes(&mut self, tensor: &Tensor, apply_padding: bool) -> Result<Tensor> {
        tensor_out(|out| unsafe { sys::accel_accelerator_split_between_processes(self.raw, tensor.raw, apply_padding, out) })
    }

    /// Raise this process's trigger (`set_trigger`).
    pub fn set_trigger(&mut self) -> Result<()> {
        check(unsafe { sys::accel_accelerator_set_trigger(self.raw) })
    }

    /// True on every process when any process raised its trigger since the last `true` (one collective).
    pub fn check_trigger(&mut self) -> Result<bool> {
        let mut out = false;
        check(unsafe { sys::accel_accelerator_check_trigger(self.raw, &mut out) })?;
        Ok(out)
    }

    /// Block until every process reaches this call.
    pub fn wait_for_everyone(&mut self) -> Result<()> {
        check(unsafe { sys::accel_accelerator_wait_for_everyone(self.raw) })
    }

    /// Enter `main_process_first()`: the main process runs the block before the others.
    pub fn main_process_first(&mut self) -> Result<Scope<'_>> {
        check(unsafe { sys::accel_accelerator_main_process_first_begin(self.raw) })?;
        Ok(Scope::new(self, sys::accel_accelerator_main_process_first_end))
    }

    /// Enter `local_main_process_first()`: each machine's local main process runs the block first.
    pub fn local_main_process_first(&mut self) -> Result<Scope<'_>> {
        check(unsafe { sys::accel_accelerator_local_main_process_first_begin(self.raw) })?;
        Ok(Scope::new(self, sys::accel_accelerator_local_main_process_first_end))
    }

    /// Accelerate's `on_main_process`: runs `f` on the main process only (`Ok(None)` elsewhere).
    pub fn on_main_process<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok(if self.is_main_process()? { Some(f()) } else { None })
    }

    /// Accelerate's `on_local_main_process`.
    pub fn on_local_main_process<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok(if self.is_local_main_process()? { Some(f()) } else { None })
    }

    /// Accelerate's `on_last_process`.
    pub fn on_last_process<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok(if self.is_last_process()? { Some(f()) } else { None })
    }

    /// Accelerate's `on_process(process_index=index)`.
    pub fn on_process<R>(&self, index: i32, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok(if self.process_index()? == index { Some(f()) } else { None })
    }

    pub fn process_index(&self) -> Result<i32> {
        self.query(sys::accel_accelerator_get_process_index)
    }

    pub fn local_process_index(&self) -> Result<i32> {
        self.query(sys::accel_accelerator_get_local_process_index)
    }

    pub fn is_local_main_process(&self) -> Result<bool> {
        self.query(sys::accel_accelerator_is_local_main_process)
    }

    pub fn num_local_processes(&self) -> Result<i32> {
        self.query(sys::accel_accelerator_get_num_local_processes)
    }

    pub fn is_last_process(&self) -> Result<bool> {
        self.query(sys::accel_accelerator_is_last_process)
    }

    /// "single", "gloo", "mpi" or "nccl".
    pub fn distributed_backend(&self) -> Result<&'static str> {
        let mut s: *const c_char = ptr::null();
        check(unsafe { sys::accel_accelerator_get_distributed_backend(self.raw, &mut s) })?;
        // A static string in the library.
        Ok(unsafe { CStr::from_ptr(s) }.to_str().unwrap_or(""))
    }

    /// Statistics of the data-parallel gradient synchronisation, as JSON.
    pub fn ddp_stats_json(&self) -> Result<String> {
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_get_ddp_stats_json(self.raw, &mut s) })?;
        Ok(unsafe { crate::owned_string(s) })
    }

    /// This process's place on the device mesh (data, shard, tensor, context, pipeline parallel ranks and sizes,
    /// and every mesh group), as JSON.
    pub fn parallel_ranks_json(&self) -> Result<String> {
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_get_parallel_ranks_json(self.raw, &mut s) })?;
        Ok(unsafe { crate::owned_string(s) })
    }

    /// Per-rank bytes of parameters, gradients, optimizer state and gathered buffers, and peak RSS, as JSON.
    pub fn memory_stats_json(&self) -> Result<String> {
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_get_memory_stats_json(self.raw, &mut s) })?;
        Ok(unsafe { crate::owned_string(s) })
    }

    /// Sharded models: gather every parameter (collective); `summon_full_params_end` writes them back.
    pub fn summon_full_params_begin(&mut self, model: &mut Model) -> Result<()> {
        check(unsafe { sys::accel_accelerator_summon_full_params_begin(self.raw, model.raw) })
    }

    /// Writes the summoned parameters back to their shards and frees the full buffers (collective).
    pub fn summon_full_params_end(&mut self, model: &mut Model) -> Result<()> {
        check(unsafe { sys::accel_accelerator_summon_full_params_end(self.raw, model.raw) })
    }

    /// Clean optimizer steps since the gradient scaler last changed its scale (0 without a scaler).
    pub fn grad_scaler_growth_tracker(&self) -> Result<i64> {
        self.query(sys::accel_accelerator_get_grad_scaler_growth_tracker)
    }
}

impl Batch {
    /// The data set indices of the batch's samples (1-d int64, batch order).
    pub fn indices(&self) -> Result<Tensor> {
        tensor_out(|out| unsafe { sys::accel_batch_get_indices(self.raw, out) })
    }
}

/// Rank of this process on its machine, as the launcher's environment says (0 when not launched).
pub fn process_local_index() -> Result<i32> {
    let mut v = 0;
    check(unsafe { sys::accel_process_get_local_index(&mut v) })?;
    Ok(v)
}

/// Number of processes on this machine, as the launcher's environment says (1 when not launched).
pub fn process_local_count() -> Result<i32> {
    let mut v = 0;
    check(unsafe { sys::accel_process_get_local_count(&mut v) })?;
    Ok(v)
}

/// Whether this process is local rank 0.
pub fn process_is_local_main() -> Result<bool> {
    let mut v = false;
    check(unsafe { sys::accel_process_is_local_main(&mut v) })?;
    Ok(v)
}

/// Runs an object collective and copies its `accel_object_list_t` into owned byte vectors (the list is freed).
fn object_list_out(f: impl FnOnce(*mut *mut sys::accel_object_list_t) -> sys::accel_status_t) -> Result<Vec<Vec<u8>>> {
    struct List(*mut sys::accel_object_list_t);
    impl Drop for List {
        fn drop(&mut self) {
            unsafe { sys::accel_object_list_free(self.0) }
        }
    }
    let mut raw = ptr::null_mut();
    check(f(&mut raw))?;
    let list = List(raw);
    let mut count = 0usize;
    check(unsafe { sys::accel_object_list_get_count(list.0, &mut count) })?;
    (0..count)
        .map(|i| {
            let (mut data, mut size) = (ptr::null(), 0usize);
            check(unsafe { sys::accel_object_list_get_item(list.0, i, &mut data, &mut size) })?;
            Ok(unsafe { std::slice::from_raw_parts(data, size) }.to_vec())
        })
        .collect()
}

/// Object collectives (Accelerate's `gather_object`, `broadcast_object_list`, `broadcast_object`): byte strings
/// the caller serialised, or JSON text. Objects may differ in length between processes; bad input on one
/// process fails the call on every process naming it.
impl Accelerator {
    /// Every process's bytes, in rank order (one entry per process).
    pub fn gather_object(&mut self, object: &[u8]) -> Result<Vec<Vec<u8>>> {
        object_list_out(|out| unsafe { sys::accel_accelerator_gather_object(self.raw, object.as_ptr(), object.len(), out) })
    }

    /// Process `from_process`'s list on every process; the other processes' `objects` are ignored.
    pub fn broadcast_object_list<B: AsRef<[u8]>>(&mut self, objects: &[B], from_process: i32) -> Result<Vec<Vec<u8>>> {
        let items: Vec<*const u8> = objects.iter().map(|o| o.as_ref().as_ptr()).collect();
        let sizes: Vec<usize> = objects.iter().map(|o| o.as_ref().len()).collect();
        object_list_out(|out| unsafe {
            sys::accel_accelerator_broadcast_object_list(
                self.raw,
                items.as_ptr(),
                sizes.as_ptr(),
                items.len(),
                from_process,
                out,
            )
        })
    }

    /// Process `from_process`'s bytes on every process; the other processes' `object` is ignored.
    pub fn broadcast_object(&mut self, object: &[u8], from_process: i32) -> Result<Vec<u8>> {
        let mut all = object_list_out(|out| unsafe {
            sys::accel_accelerator_broadcast_object(self.raw, object.as_ptr(), object.len(), from_process, out)
        })?;
        Ok(all.pop().unwrap_or_default())
    }

    /// Each process's JSON array, concatenated in rank order into one JSON array (Accelerate's `gather_object`).
    pub fn gather_object_json(&mut self, json: &str) -> Result<String> {
        let json = cstring("json", json)?;
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe { sys::accel_accelerator_gather_object_json(self.raw, json.as_ptr(), &mut s) })?;
        Ok(unsafe { crate::owned_string(s) })
    }

    /// Process `from_process`'s JSON value on every process; the others may pass `None`.
    pub fn broadcast_object_json(&mut self, json: Option<&str>, from_process: i32) -> Result<String> {
        let json = crate::opt_cstring("json", json)?;
        let mut s: *mut c_char = ptr::null_mut();
        check(unsafe {
            sys::accel_accelerator_broadcast_object_json(self.raw, crate::opt_ptr(&json), from_process, &mut s)
        })?;
        Ok(unsafe { crate::owned_string(s) })
    }
}
