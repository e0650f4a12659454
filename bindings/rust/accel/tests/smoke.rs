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
fn smoke_scenario() -> accel::Result<()> {
    accel::set_seed(0, false, false)?;
    let mut acc2 = Accelerator::new(Some(r#"{"gradient_accumulation_steps": 2}"#))?;
    let mut model2 = Model::from_json(MODEL)?;
    let mut opt2 = Optimizer::new(&mut model2, r#"{"type": "sgd", "lr": 0.1}"#)?;
    let mut sched2 = Scheduler::new(&mut opt2, r#"{"type": "linear", "num_warmup_steps": 0, "num_training_steps": 10}"#)?;
    let (x, y) = data(16);
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

    // save_state / load_state once checkpointing is implemented.
    let dir = std::env::temp_dir().join(format!("accel-rust-{}", std::process::id()));
    let ckpt = dir.join("ckpt");
    match acc2.save_state(ckpt.to_str().unwrap()) {
        Err(e) if e.status() == Status::Unimplemented => println!("SKIP save/load state: {}", e.message()),
        Err(e) => return Err(e),
        Ok(()) => {
            let saved: Vec<f32> = model2.get_tensor(&p)?.to_vec()?;
            for _ in 0..2 {
                let batch = dl2.next_batch()?.expect("a batch");
                // train_step enters accumulate() itself.
                acc2.train_step(&mut model2, &mut opt2, Some(&mut sched2), &batch, "cross_entropy")?;
            }
            assert_ne!(saved, model2.get_tensor(&p)?.to_vec::<f32>()?);
            acc2.load_state(ckpt.to_str().unwrap())?;
            let restored: Vec<f32> = model2.get_tensor(&p)?.to_vec()?;
            for (a, b) in saved.iter().zip(&restored) {
                assert!((a - b).abs() < 1e-6);
            }
        }
    }
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
