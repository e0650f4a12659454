//! LOMO through the Rust crate: `Accelerator::lomo_backward` updates during backward (without clipping or weight
//! decay, the weights of a plain backward and an SGD step), the optimizer has no step, a bad learning rate is refused.
use accel::{Accelerator, Model, Optimizer, Status, Tensor};

const MLP: &str = r#"{"type": "mlp", "widths": [3, 4, 2]}"#;

fn run(config: &str, lomo: bool) -> accel::Result<(Accelerator, Optimizer, Model, Vec<f32>)> {
    accel::set_seed(7, false, false)?;
    let mut acc = Accelerator::new(None)?;
    let mut model = Model::from_json(MLP)?;
    let mut opt = Optimizer::new(&mut model, config)?;
    acc.prepare(Some(&mut model), Some(&mut opt), None, None)?;
    let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 1.5, 0.25, -0.75], &[2, 3])?;
    let y = Tensor::from_slice(&[1.0f32, -1.0, 0.0, 2.0], &[2, 2])?;
    let out = model.forward(&x)?;
    let mut loss = accel::compute_loss("mse", &out, &y)?;
    if lomo {
        acc.lomo_backward(&mut loss, 0.1)?;
    } else {
        acc.backward(&mut loss)?;
        opt.step()?;
    }
    let name = model.parameter_name(0)?.to_string();
    let w: Vec<f32> = model.get_tensor(&name)?.to_vec()?;
    Ok((acc, opt, model, w))
}

#[test]
fn lomo_equals_sgd_and_refusals() -> accel::Result<()> {
    let (_, _, _, want) = run(r#"{"type": "sgd", "lr": 0.1}"#, false)?;
    let (mut acc, mut opt, mut model, got) = run(r#"{"type": "lomo"}"#, true)?;
    for (a, b) in got.iter().zip(want.iter()) {
        assert!((a - b).abs() <= 1e-6, "{} vs {}", a, b);
    }
    let e = opt.step().unwrap_err();
    assert_eq!(e.status(), Status::FailedPrecondition);
    assert!(e.message().contains("lomo_backward"), "{}", e.message());
    let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0], &[1, 3])?;
    let out = model.forward(&x)?;
    let mut loss = accel::compute_loss("mse", &out, &Tensor::from_slice(&[1.0f32, 0.0], &[1, 2])?)?;
    assert_eq!(acc.lomo_backward(&mut loss, f64::NAN).unwrap_err().status(), Status::InvalidArgument);
    Ok(())
}
