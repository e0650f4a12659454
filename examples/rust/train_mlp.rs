//! Train an MLP on a synthetic classification set through accel's Rust crate.
//!
//!   cargo run --manifest-path bindings/rust/Cargo.toml -p accel --example train_mlp ['<accelerator config JSON>']
//!
//! The same program as examples/c/train_mlp.c: the same data generator and seed, so it prints the same
//! losses. Exits non-zero if training accuracy stays below 95 %.
use accel::{Accelerator, DataLoader, Model, Optimizer, Scheduler, Tensor};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Instant;

const NUM_SAMPLES: usize = 2048;
const NUM_FEATURES: usize = 16;
const NUM_CLASSES: usize = 4;
const EPOCHS: i64 = 8;

/// The C example's generator: a 64-bit LCG and Box-Muller, so the data set is the same everywhere.
struct Lcg(u64);

impl Lcg {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 + 0.5) / 9007199254740992.0
    }

    fn gaussian(&mut self) -> f64 {
        let u1 = self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (6.283185307179586 * u2).cos()
    }
}

fn accuracy(model: &mut Model, features: &Tensor, labels: &[i64]) -> accel::Result<f64> {
    model.eval()?;
    let logits: Vec<f32> = model.forward_no_grad(features)?.to_vec()?;
    model.train()?;
    let correct = logits
        .chunks(NUM_CLASSES)
        .zip(labels)
        .filter(|(row, &label)| {
            let mut best = 0;
            for c in 1..NUM_CLASSES {
                if row[c] > row[best] {
                    best = c;
                }
            }
            best as i64 == label
        })
        .count();
    Ok(correct as f64 / NUM_SAMPLES as f64)
}

fn run(config: Option<&str>) -> accel::Result<f64> {
    let mut rng = Lcg(0x9E3779B97F4A7C15);
    let centers: Vec<Vec<f64>> =
        (0..NUM_CLASSES).map(|_| (0..NUM_FEATURES).map(|_| 1.0 * rng.gaussian()).collect()).collect();
    let mut x = Vec::with_capacity(NUM_SAMPLES * NUM_FEATURES);
    let mut y = Vec::with_capacity(NUM_SAMPLES);
    for i in 0..NUM_SAMPLES {
        let c = i % NUM_CLASSES;
        y.push(c as i64);
        for f in 0..NUM_FEATURES {
            x.push((centers[c][f] + rng.gaussian()) as f32);
        }
    }

    accel::set_seed(42, false, false)?;
    let mut acc = Accelerator::new(config)?;
    let features = Tensor::from_slice(&x, &[NUM_SAMPLES as i64, NUM_FEATURES as i64])?;
    let labels = Tensor::from_slice(&y, &[NUM_SAMPLES as i64])?;
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [16, 64, 64, 4], "activation": "relu"}"#)?;
    let mut opt = Optimizer::new(&mut model, r#"{"type": "adamw", "lr": 0.003}"#)?;
    let mut dl = DataLoader::new(&features, Some(&labels), r#"{"batch_size": 64, "shuffle": true, "seed": 42}"#)?;
    let total = EPOCHS * dl.len()? / acc.gradient_accumulation_steps()?;
    let mut sched = Scheduler::new(
        &mut opt,
        &format!(r#"{{"type": "cosine", "num_warmup_steps": 10, "num_training_steps": {total}}}"#),
    )?;
    acc.prepare(Some(&mut model), Some(&mut opt), Some(&mut dl), Some(&mut sched))?;

    // Every step's loss and learning rate go to the trackers of the config's "log_with" (none: nothing).
    acc.init_trackers("train_mlp", Some(&format!(r#"{{"lr": 0.003, "batch_size": 64, "epochs": {EPOCHS}}}"#)), None)?;
    // A progress bar on the main process when the output is a terminal (accel launch: ACCEL_PROGRESS_TTY).
    let bar = acc.is_main_process()?
        && (std::io::stdout().is_terminal() || std::env::var("ACCEL_PROGRESS_TTY").as_deref() == Ok("1"));
    let (batches, processes) = (dl.len()?, acc.num_processes()? as i64);
    let mut global_step = 0;
    let (mut acc_value, mut final_loss) = (0.0, 0.0);
    for epoch in 1..=EPOCHS {
        let start = Instant::now();
        let (mut loss_sum, mut steps) = (0.0, 0i64);
        for batch in dl.pass() {
            let loss = acc.train_step(&mut model, &mut opt, Some(&mut sched), &batch?, "cross_entropy")?;
            acc.log(&format!(r#"{{"loss": {loss}, "lr": {}}}"#, sched.last_lr()?), Some(global_step))?;
            global_step += 1;
            loss_sum += loss;
            steps += 1;
            if bar {
                let filled = (20 * steps / batches) as usize;
                print!(
                    "\repoch {epoch}/{EPOCHS} [{}{}] {steps}/{batches}  {:.0} samples/s  loss {:.4}",
                    "#".repeat(filled),
                    ".".repeat(20 - filled),
                    (steps * 64 * processes) as f64 / start.elapsed().as_secs_f64(),
                    loss_sum / steps as f64
                );
                std::io::stdout().flush().ok();
            }
        }
        if bar {
            print!("\r\x1b[K"); // before the epoch line, which the library writes through C's stdout
            std::io::stdout().flush().ok();
        }
        acc_value = accuracy(&mut model, &features, &y)?;
        final_loss = loss_sum / steps as f64;
        acc.print(&format!(
            "epoch {epoch}/{EPOCHS}  loss {final_loss:.4}  train accuracy {:5.1}%  lr {:.5}  ({:.2} s)",
            100.0 * acc_value,
            sched.last_lr()?,
            start.elapsed().as_secs_f64()
        ))?;
    }
    acc.print(&format!("final loss {final_loss:.8}"))?;
    acc.end_training()?;
    Ok(acc_value)
}

fn main() -> ExitCode {
    let config = std::env::args().nth(1);
    match run(config.as_deref()) {
        Ok(acc) if acc >= 0.95 => ExitCode::SUCCESS,
        Ok(acc) => {
            eprintln!("train_mlp: training accuracy {:.1}% is below 95%", 100.0 * acc);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("train_mlp: {e}");
            ExitCode::FAILURE
        }
    }
}
