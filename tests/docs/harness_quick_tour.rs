// Harness of the quick tour's Rust block (tests/docs/run_snippets.py puts the block in place of the snippet line
// below and builds it with cargo, offline, against bindings/rust/accel): it gives the block a learnable data
// set; the block must compile and train both of its loops without an error.
#![allow(unused_variables, unused_mut)]
use accel::{Accelerator, DataLoader, Model, Optimizer, Tensor};

fn run() -> Result<(), accel::Error> {
    let mut state: u64 = 42;
    let (mut x, mut y) = (Vec::<f32>::new(), Vec::<i64>::new());
    for _ in 0..2048 {
        // class = which of the first 4 features is largest
        let row: Vec<f32> = (0..16)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 40) as f32) / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        let best = (0..4).fold(0, |b, c| if row[c] > row[b] { c } else { b });
        x.extend_from_slice(&row);
        y.push(best as i64);
    }
    let features = Tensor::from_slice(&x, &[2048, 16])?;
    let labels = Tensor::from_slice(&y, &[2048])?;
@SNIPPET@
    Ok(())
}

fn main() {
    match run() {
        Ok(()) => println!("the Rust quick tour trained"),
        Err(e) => {
            eprintln!("{}", e);
            std::process::exit(1);
        }
    }
}
