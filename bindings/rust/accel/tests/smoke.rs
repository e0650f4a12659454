//! The bindings' smoke scenario (conventions.md, "Tests") for the Rust crate.
use accel::{Accelerator, DataLoader, Model, Optimizer, Scheduler, Status, Tensor};

const MODEL: &str = r#"{"type": "mlp", "widths": [4, 8, 3]}"#;

fn data(n: usize) -> (Tensor, Tensor) {
    let mut x = Vec::with_capacity(n * 4);
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        y.push((i % 3) as i64);
        for j in 0..4 {
            x.push(((i * 7 + j * 3) % 11) as f32 / 11.0);
        }
    }
    (Tensor::from_slice(&x, &[n as i64, 4]).unwrap(), Tensor::from_slice(&y, &[n as i64]).unwrap())
}

#[test]
fn profile_writes_a_chrome_trace() -> accel::Result<()> {
    // No output_trace_dir: refused. With one: profile_0.json holds the operators and accel's ranges.
    let mut bare = Accelerator::new(None)?;
    assert_eq!(bare.profile().err().expect("an error").status().code(), Status::FailedPrecondition.code());
    let dir = std::env::temp_dir().join(format!("accel_rust_profile_{}", std::process::id()));
    let config = format!(r#"{{"kwargs_handlers": {{"profile": {{"output_trace_dir": "{}"}}}}}}"#, dir.display());
    let mut acc = Accelerator::new(Some(&config))?;
    let mut model = Model::from_json(MODEL)?;
    let mut opt = Optimizer::new(&mut model, r#"{"type": "sgd", "lr": 0.1}"#)?;
    let (x, y) = data(8);
    let mut dl = DataLoader::new(&x, Some(&y), r#"{"batch_size": 4}"#)?;
    acc.prepare(Some(&mut model), Some(&mut opt), Some(&mut dl), None)?;
    let mut p = acc.profile()?;
    let batch = dl.next_batch()?.expect("a batch");
    p.accelerator().train_step(&mut model, &mut opt, None, &batch, "cross_entropy")?;
    p.end()?;
    let trace = std::fs::read_to_string(dir.join("profile_0.json")).expect("the trace");
    assert!(trace.contains("\"traceEvents\"") && trace.contains("\"aten::addmm\"") && trace.contains("\"accel::optimizer_step\""));
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[test]
fn smoke_scenario() -> accel::Result<()> {
    accel::set_seed(0, false, false)?;
    let mut acc2 = Accelerator::new(Some(r#"{"gradient_accumulation_steps": 2}"#))?;
    let mut model2 = Model::from_json(MODEL)?;
    let mut opt2 = Optimizer::new(&mut model2, r#"{"type": "sgd", "lr": 0.1}"#)?;
    let mut sched2 = Scheduler::new(&mut opt2, r#"{"type": "linear", "num_warmup_steps": 0, "num_training_steps": 10}"#)?;
    let (x, y) = data(24); // 6 batches: 2 trained, 2 after the save, repeated after the load, 1 more
    let mut dl2 = DataLoader::new(&x, Some(&y), r#"{"batch_size": 4}"#)?;
    acc2.prepare(Some(&mut model2), Some(&mut opt2), Some(&mut dl2), Some(&mut sched2))?;
    assert_eq!(acc2.gradient_accumulation_steps()?, 2);

    // Two micro-steps = one optimizer step, each inside an accumulate guard.
    let p = model2.parameter_name(0)?.to_string();
    let w0: Vec<f32> = model2.get_tensor(&p)?.to_vec()?;
    let mut syncs = Vec::new();
    for _ in 0..2 {
        let batch = dl2.next_batch()?.expect("a batch");
        let mut ctx = acc2.accumulate(&mut model2)?;
        let out = model2.forward(&batch.inputs()?)?;
        let mut loss = accel::compute_loss("cross_entropy", &out, &batch.labels()?.expect("labels"))?;
        assert!(loss.item()? > 0.0);
        ctx.accelerator().backward(&mut loss)?;
        opt2.step()?;
        sched2.step()?;
        opt2.zero_grad()?;
        syncs.push(ctx.accelerator().sync_gradients()?);
        ctx.end()?;
    }
    assert_eq!(syncs, vec![false, true]);
    assert_eq!(acc2.step()?, 2);
    assert_eq!(sched2.step_count()?, 1);
    let w1: Vec<f32> = model2.get_tensor(&p)?.to_vec()?;
    assert_ne!(w0, w1, "the optimizer step changed no weight");

    // save_state / load_state: two more steps after the load repeat the two steps after the save exactly
    // (weights, optimizer, scheduler, accumulate()'s step and the loader's position are restored).
    let dir = std::env::temp_dir().join(format!("accel-rust-{}", std::process::id()));
    let ckpt = dir.join("ckpt");
    let ckpt_str = ckpt.to_str().unwrap();
    // Saved asynchronously: the two steps run while the files are written, and change nothing in them.
    assert_eq!(acc2.save_state_with_options(Some(ckpt_str), Some(r#"{"async": true}"#))?, ckpt_str);
    let saved: Vec<f32> = model2.get_tensor(&p)?.to_vec()?;
    let saved_counts = (acc2.step()?, sched2.step_count()?);
    let first = two_steps(&mut acc2, &mut model2, &mut opt2, &mut sched2, &mut dl2, &p)?;
    acc2.wait_for_checkpoint()?;
    assert!(ckpt.join("model.safetensors").is_file());
    assert_ne!(first.0, saved);
    assert_eq!(first.1, saved_counts.0 + 2);
    assert_eq!(acc2.load_state_with_options(Some(ckpt_str), None)?, ckpt_str);
    assert_eq!(model2.get_tensor(&p)?.to_vec::<f32>()?, saved);
    assert_eq!((acc2.step()?, sched2.step_count()?), saved_counts);
    let again = two_steps(&mut acc2, &mut model2, &mut opt2, &mut sched2, &mut dl2, &p)?;
    assert_eq!(again, first, "the steps after load_state differ from those after save_state");
    let _ = std::fs::remove_dir_all(&dir);

    // An invalid config: InvalidArgument naming the JSON path.
    let err = Accelerator::new(Some(r#"{"kwargs_handlers": {"autocast": {"enabled": "yes"}}}"#)).err().expect("an error");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("kwargs_handlers.autocast.enabled"), "{}", err);
    assert!(err.to_string().starts_with("ACCEL_ERR_INVALID_ARGUMENT: "));

    // Free the accelerator before its children: they stay usable.
    drop(acc2);
    let batch = dl2.next_batch()?.expect("a batch");
    let out = model2.forward(&batch.inputs()?)?;
    assert_eq!(out.shape()?, vec![4, 3]);
    opt2.step()?;
    Ok(())
}

/// Two train steps (train_step enters accumulate() itself); returns parameter `p`, the accelerator's step
/// and the scheduler's step count afterwards.
fn two_steps(
    acc: &mut Accelerator,
    model: &mut Model,
    opt: &mut Optimizer,
    sched: &mut Scheduler,
    dl: &mut DataLoader,
    p: &str,
) -> accel::Result<(Vec<f32>, i64, i64)> {
    for _ in 0..2 {
        let batch = dl.next_batch()?.expect("a batch");
        acc.train_step(model, opt, Some(&mut *sched), &batch, "cross_entropy")?;
    }
    Ok((model.get_tensor(p)?.to_vec()?, acc.step()?, sched.step_count()?))
}

#[test]
fn tensors_and_passes() -> accel::Result<()> {
    let t = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    assert_eq!(t.shape()?, vec![2, 3]);
    assert_eq!(t.to_vec::<f64>()?, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(t.to_vec::<f32>().unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(Tensor::from_slice(&[0f32; 3], &[2, 2]).err().unwrap().status(), Status::InvalidArgument);
    let (x, _) = data(10);
    let mut dl = DataLoader::new(&x, None, r#"{"batch_size": 4}"#)?;
    let mut n = 0;
    for b in dl.pass() {
        assert!(b?.labels()?.is_none());
        n += 1;
    }
    assert_eq!(n, 3);
    assert_eq!(dl.pass().count(), 3);
    Ok(())
}

#[test]
fn accumulate_end_failure_is_reported() -> accel::Result<()> {
    let mut acc = Accelerator::new(None)?;
    let mut model = Model::from_json(MODEL)?;
    acc.prepare(Some(&mut model), None, None, None)?;
    let ctx = acc.accumulate(&mut model)?;
    ctx.end()?;
    // A second begin inside an open context fails with FailedPrecondition.
    let mut outer = acc.accumulate(&mut model)?;
    let nested = unsafe { accel_sys_begin(outer.accelerator(), &mut model) };
    assert_eq!(nested, 9);
    Ok(())
}

unsafe fn accel_sys_begin(acc: &mut Accelerator, model: &mut Model) -> i32 {
    accel_sys::accel_accelerator_accumulate_begin(acc.as_ptr(), model.as_ptr())
}

#[test]
fn collectives_single_process() -> accel::Result<()> {
    let mut acc = Accelerator::new(None)?;
    let mut t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    let v: Vec<f32> = t.to_vec()?;
    for out in [
        acc.gather(&t)?,
        acc.gather_for_metrics(&t)?,
        acc.reduce(&t, "mean")?,
        acc.pad_across_processes(&t, 0, -1.0, true)?,
        acc.split_between_processes(&t, true)?,
    ] {
        assert_eq!(out.to_vec::<f32>()?, v);
    }
    let err = acc.reduce(&t, "product").err().expect("an error");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("reduction"), "{err}");
    acc.broadcast(&mut t, 0)?;
    assert_eq!(t.to_vec::<f32>()?, v);
    assert_eq!(acc.broadcast(&mut t, 1).unwrap_err().status(), Status::OutOfRange);
    acc.wait_for_everyone()?;
    assert!(!acc.check_trigger()?);
    acc.set_trigger()?;
    assert!(acc.check_trigger()?);
    assert!(!acc.check_trigger()?);
    // A tracker written in Rust: told init, log and finish; Err(status) fails the call with it.
    {
        use std::sync::{Arc, Mutex};
        let seen: Arc<Mutex<Vec<(accel::TrackerEvent, String, i64)>>> = Arc::new(Mutex::new(Vec::new()));
        let mut tracked = Accelerator::new(None)?;
        let record = Arc::clone(&seen);
        tracked.add_tracker("recorder", move |event, json, step| {
            record.lock().unwrap().push((event, json.to_string(), step));
            if json.contains("refuse") { Err(Status::Unavailable) } else { Ok(()) }
        })?;
        tracked.init_trackers("run", Some(r#"{"lr": 0.1}"#), None)?;
        tracked.log(r#"{"loss": 0.5}"#, Some(3))?;
        let err = tracked.log(r#"{"refuse": 1}"#, Some(4)).unwrap_err();
        assert_eq!(err.status(), Status::Unavailable);
        assert!(err.message().contains("recorder"), "{err}");
        tracked.end_training()?;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4);
        assert_eq!((seen[0].0, seen[0].2), (accel::TrackerEvent::Init, -1));
        assert!(seen[0].1.contains("lr"));
        assert_eq!((seen[1].0, seen[1].2), (accel::TrackerEvent::Log, 3));
        assert!(seen[1].1.contains("loss"));
        assert_eq!((seen[3].0, seen[3].2), (accel::TrackerEvent::Finish, -1));
    }
    assert_eq!(acc.on_main_process(|| 7)?, Some(7));
    assert_eq!(acc.on_process(1, || 7)?, None);
    assert_eq!(acc.on_last_process(|| "last")?, Some("last"));
    assert_eq!(acc.on_local_main_process(|| ())?, Some(()));
    acc.free_memory()?; // nothing prepared: nothing to release
    acc.clear()?;
    {
        let mut outer = acc.main_process_first()?;
        let inner = outer.accelerator().local_main_process_first()?;
        inner.end()?;
        outer.end()?;
    }
    drop(acc.main_process_first()?); // ended by Drop
    assert_eq!(
        unsafe { accel_sys::accel_accelerator_main_process_first_end(acc.as_ptr()) },
        Status::FailedPrecondition.code()
    );
    assert_eq!(acc.num_local_processes()?, 1);
    assert!(acc.is_last_process()?);
    assert_eq!(acc.distributed_backend()?, "single");
    assert!(acc.ddp_stats_json()?.contains("\"models\""));
    assert!(acc.memory_stats_json()?.contains("\"peak_rss_bytes\""));
    assert_eq!(acc.grad_scaler_growth_tracker()?, 0);
    assert_eq!((accel::process_local_index()?, accel::process_local_count()?, accel::process_is_local_main()?), (0, 1, true));
    let (x, y) = data(10);
    let mut dl = DataLoader::new(&x, Some(&y), r#"{"batch_size": 4}"#)?;
    let seen: Vec<Vec<i64>> = dl.pass().map(|b| b?.indices()?.to_vec::<i64>()).collect::<accel::Result<_>>()?;
    assert_eq!(seen, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
    Ok(())
}

#[test]
fn trackers() -> accel::Result<()> {
    let dir = std::env::temp_dir().join(format!("accel-rust-trackers-{}", std::process::id()));
    let config = format!(r#"{{"log_with": "jsonl", "project_config": {{"logging_dir": "{}"}}}}"#, dir.display());
    let mut acc = Accelerator::new(Some(&config))?;
    acc.init_trackers("exp", Some(r#"{"lr": 0.1}"#), None)?;
    acc.log(r#"{"loss": 0.5}"#, Some(3))?;
    assert!(acc.tracker_json("jsonl")?.contains("metrics.jsonl"));
    acc.end_training()?;
    let text = std::fs::read_to_string(dir.join("exp").join("metrics.jsonl")).expect("metrics.jsonl");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.lines().nth(1).unwrap().starts_with(r#"{"step":3,"#), "{text}");
    assert!(acc.log("[1]", None).is_err());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn checkpoint_options_blobs_and_save_model() -> accel::Result<()> {
    let dir = std::env::temp_dir().join(format!("accel-rust-ckpt-{}", std::process::id()));
    let project = dir.join("proj");
    let config = format!(r#"{{"project_config": {{"project_dir": "{}", "automatic_checkpoint_naming": true}}}}"#, project.display());
    let mut acc = Accelerator::new(Some(&config))?;
    let mut model = Model::from_json(MODEL)?;
    let mut opt = Optimizer::new(&mut model, r#"{"type": "sgd", "lr": 0.1}"#)?;
    acc.prepare(Some(&mut model), Some(&mut opt), None, None)?;
    assert_eq!(acc.register_bytes_for_checkpointing(b"first")?, 0);
    assert_eq!(acc.register_bytes_for_checkpointing(&[])?, 1);
    assert_eq!(acc.project_iteration()?, 0);
    assert!(!acc.load_latest_state()?, "a fresh start loads nothing");
    let first = acc.save_state_with_options(None, Some(r#"{"safe_serialization": false}"#))?;
    assert_eq!(first, project.join("checkpoints").join("checkpoint_0").to_str().unwrap());
    assert!(std::path::Path::new(&first).join("pytorch_model.bin").is_file());
    assert_eq!(acc.project_iteration()?, 1);
    assert_eq!(acc.checkpointing_bytes(0)?, b"first");
    assert_eq!(acc.checkpointing_bytes(1)?, b"");
    assert_eq!(acc.checkpointing_bytes(2).unwrap_err().status(), Status::OutOfRange);
    let err = acc.save_state_with_options(None, Some(r#"{"safe_serialization": "yes"}"#)).unwrap_err();
    assert!(err.status() == Status::InvalidArgument && err.message().contains("safe_serialization"), "{err}");
    assert_eq!(acc.load_state_with_options(None, Some(r#"{"strict": true}"#))?, first);
    assert!(acc.load_latest_state()?, "the newest automatic checkpoint");
    assert_eq!(acc.project_iteration()?, 1);

    let exported = dir.join("export");
    acc.save_model(&model, exported.to_str().unwrap(), Some(r#"{"max_shard_size": 200}"#))?;
    assert!(exported.join("model.safetensors.index.json").is_file());
    accel::set_seed(5, false, false)?;
    let mut other = Model::from_json(MODEL)?;
    let p = model.parameter_name(0)?.to_string();
    assert_ne!(other.get_tensor(&p)?.to_vec::<f32>()?, model.get_tensor(&p)?.to_vec::<f32>()?);
    other.load_checkpoint(exported.to_str().unwrap(), Some(r#"{"strict": true}"#))?;
    for i in 0..model.num_parameters()? {
        let name = model.parameter_name(i)?.to_string();
        assert_eq!(other.get_tensor(&name)?.to_vec::<f32>()?, model.get_tensor(&name)?.to_vec::<f32>()?);
    }
    // The shards merged into one pytorch_model.bin (merge_fsdp_weights) load the same weights.
    let (merged, count) = accel::merge_weights(
        exported.to_str().unwrap(),
        dir.join("merged").to_str().unwrap(),
        Some(r#"{"safe_serialization": false}"#),
    )?;
    assert!(merged.ends_with("pytorch_model.bin") && count == model.num_parameters()? as i64, "{merged} {count}");
    other.load_checkpoint(&merged, Some(r#"{"strict": true}"#))?;
    assert_eq!(other.get_tensor(&p)?.to_vec::<f32>()?, model.get_tensor(&p)?.to_vec::<f32>()?);
    let missing = dir.join("missing");
    assert_eq!(other.load_checkpoint(missing.to_str().unwrap(), None).unwrap_err().status(), Status::NotFound);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn grad_scaler_autocast_and_clipping() -> accel::Result<()> {
    // fp16 with autocast off: the dynamic loss scaler runs with fp32 compute on the CPU.
    let mut acc = Accelerator::new(Some(r#"{"mixed_precision": "fp16", "kwargs_handlers": {"autocast": {"enabled": false}}}"#))?;
    let mut model = Model::from_json(MODEL)?;
    let mut opt = Optimizer::new(&mut model, r#"{"type": "sgd", "lr": 0.1}"#)?;
    let (x, y) = data(8);
    let mut dl = DataLoader::new(&x, Some(&y), r#"{"batch_size": 4}"#)?;
    acc.prepare(Some(&mut model), Some(&mut opt), Some(&mut dl), None)?;
    assert_eq!(acc.mixed_precision()?, 1);
    assert!(acc.has_grad_scaler()?);
    let initial_scale = acc.grad_scale()?;
    assert!(initial_scale > 1.0, "scale {initial_scale}");
    assert_eq!(acc.process_index()?, 0);
    assert_eq!(acc.local_process_index()?, 0);
    assert!(acc.is_local_main_process()?);

    let batch = dl.next_batch()?.expect("a batch");
    let out = model.forward(&batch.inputs()?)?;
    let mut loss = accel::compute_loss("cross_entropy", &out, &batch.labels()?.expect("labels"))?;
    acc.backward(&mut loss)?;
    let p = model.parameter_name(0)?.to_string();
    let scaled = model.get_gradient(&p)?.expect("a gradient").to_vec::<f32>()?;
    acc.unscale_gradients(Some(&mut opt))?;
    let unscaled = model.get_gradient(&p)?.expect("a gradient").to_vec::<f32>()?;
    for (s, u) in scaled.iter().zip(&unscaled) {
        assert!((s / initial_scale as f32 - u).abs() <= 1e-6 * (1.0 + u.abs()), "{s} / {initial_scale} != {u}");
    }
    opt.step()?;
    assert!(!acc.optimizer_step_was_skipped()?);
    assert_eq!(acc.grad_scaler_growth_tracker()?, 1);
    opt.zero_grad()?;

    // A second step: clip_grad_value unscales by itself, then clamps.
    let batch = dl.next_batch()?.expect("a batch");
    let out = model.forward(&batch.inputs()?)?;
    let mut loss = accel::compute_loss("cross_entropy", &out, &batch.labels()?.expect("labels"))?;
    acc.backward(&mut loss)?;
    acc.clip_grad_value(&mut model, 1e-4)?;
    let clipped = model.get_gradient(&p)?.expect("a gradient").to_vec::<f32>()?;
    assert!(clipped.iter().all(|g| g.abs() <= 1e-4 + 1e-9));
    assert!(clipped.iter().any(|g| g.abs() > 0.0));
    opt.step()?;
    assert_eq!(acc.grad_scaler_growth_tracker()?, 2);
    assert!(acc.end_of_dataloader()?, "the second of two batches is the last of the pass");

    // Autocast on the CPU needs bf16 (LibTorch 1.13's CPU autocast has no fp16).
    let mut bf16 = Accelerator::new(Some(r#"{"mixed_precision": "bf16"}"#))?;
    let scope = bf16.autocast()?;
    scope.end()?;
    drop(bf16.autocast()?); // ended by Drop
    assert_eq!(
        unsafe { accel_sys::accel_accelerator_autocast_end(bf16.as_ptr()) },
        Status::FailedPrecondition.code()
    );
    Ok(())
}
