//! Trains two steps through the packaged accel crates and prints where libaccel was loaded from.
use accel::{Accelerator, DataLoader, Model, Optimizer, Tensor};

fn main() -> accel::Result<()> {
    const N: usize = 128;
    const F: usize = 8;
    let mut x = vec![0f32; N * F];
    let mut y = vec![0i64; N];
    for i in 0..N {
        for j in 0..F {
            x[i * F + j] = (((i * 7 + j * 13) % 17) as f32 - 8.0) / 8.0;
        }
        y[i] = (x[i * F] > 0.0) as i64;
    }
    accel::set_seed(42, false, false)?;
    let mut acc = Accelerator::new(Some("{}"))?;
    let features = Tensor::from_slice(&x, &[N as i64, F as i64])?;
    let labels = Tensor::from_slice(&y, &[N as i64])?;
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [8, 16, 2]}"#)?;
    let mut opt = Optimizer::new(&mut model, r#"{"type": "sgd", "lr": 0.1}"#)?;
    let mut dl = DataLoader::new(&features, Some(&labels), r#"{"batch_size": 64}"#)?;
    acc.prepare(Some(&mut model), Some(&mut opt), Some(&mut dl), None)?;
    let mut losses = Vec::new();
    for batch in dl.pass() {
        losses.push(acc.train_step(&mut model, &mut opt, None, &batch?, "cross_entropy")?);
        if losses.len() == 2 {
            break;
        }
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let lib = maps.lines().filter(|l| l.contains("libaccel.so")).filter_map(|l| l.split_whitespace().last()).next();
    println!("accel {} from {}: {} steps, loss {:.4} -> {:.4}", accel::version_string(), lib.unwrap_or("(not mapped)"),
             losses.len(), losses[0], losses[losses.len() - 1]);
    Ok(())
}
