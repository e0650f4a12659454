//! `DataLoader::from_tokens` and `Model::generate`: the language-model pieces of the C API.
use accel::{Accelerator, DataLoader, Model, Optimizer, Status, Tensor};

const GPT: &str = r#"{"type": "gpt", "vocab_size": 8, "n_positions": 32, "n_embd": 8, "n_layer": 1, "n_head": 2,
    "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}"#;

fn stream(n: usize) -> Tensor {
    let tokens: Vec<i64> = (0..n as i64).map(|i| i % 8).collect();
    Tensor::from_slice(&tokens, &[n as i64]).unwrap()
}

#[test]
fn from_tokens_windows_and_labels() -> accel::Result<()> {
    // 50 tokens, windows of 4 + 1 at stride 4: 12 windows, 6 batches of 2, in order.
    let mut dl = DataLoader::from_tokens(&stream(50), r#"{"block_size": 4, "batch_size": 2, "shuffle": false}"#)?;
    assert_eq!(dl.len()?, 6);
    let batch = dl.next_batch()?.expect("a batch");
    let inputs = batch.inputs()?;
    assert_eq!(inputs.shape()?, vec![2, 4]);
    assert_eq!(inputs.to_vec::<i64>()?, vec![0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(batch.labels()?.expect("labels").to_vec::<i64>()?, vec![1, 2, 3, 4, 5, 6, 7, 0]);
    assert_eq!(dl.pass().count(), 5); // the rest of the pass

    let e = DataLoader::from_tokens(&stream(50), r#"{"batch_size": 2}"#).err().expect("block_size is required");
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("block_size"), "{}", e.message());
    Ok(())
}

#[test]
fn train_on_tokens_then_generate() -> accel::Result<()> {
    accel::set_seed(3, false, false)?;
    let mut acc = Accelerator::new(None)?;
    let mut model = Model::from_json(GPT)?;
    let mut opt = Optimizer::new(&mut model, r#"{"type": "adamw", "lr": 0.01}"#)?;
    let mut dl = DataLoader::from_tokens(&stream(200), r#"{"block_size": 8, "batch_size": 4, "seed": 1}"#)?;
    acc.prepare(Some(&mut model), Some(&mut opt), Some(&mut dl), None)?;
    let mut losses = Vec::new();
    for batch in dl.pass() {
        losses.push(acc.train_step(&mut model, &mut opt, None, &batch?, "causal_lm")?);
    }
    assert!(losses.len() >= 2 && losses.iter().all(|l| l.is_finite()));

    model.eval()?;
    let prompt = Tensor::from_slice(&[1i64, 2, 3], &[3])?;
    let out = model.generate(&prompt, Some(r#"{"max_new_tokens": 5}"#))?;
    assert_eq!(out.shape()?, vec![8]);
    let ids = out.to_vec::<i64>()?;
    assert_eq!(&ids[..3], &[1, 2, 3]);
    assert!(ids.iter().all(|&t| (0..8).contains(&t)), "{ids:?}");
    assert_eq!(model.generate(&prompt, Some(r#"{"max_new_tokens": 5}"#))?.to_vec::<i64>()?, ids, "greedy is deterministic");
    let default = model.generate(&prompt, None)?; // 20 new tokens, greedy
    assert_eq!(default.shape()?, vec![23]);

    let e = model.generate(&prompt, Some(r#"{"max_new_tokens": "five"}"#)).err().expect("a bad option");
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("max_new_tokens"), "{}", e.message());
    Ok(())
}

#[test]
fn small_getters() -> accel::Result<()> {
    assert_eq!(accel::version_number() / 1_000_000, accel::version_string().split('.').next().unwrap().parse::<i32>().unwrap());
    assert_eq!((accel::process_index()?, accel::process_count()?, accel::process_is_main()?), (0, 1, true));
    let t = Tensor::from_slice(&[1i32, 2, 3], &[3])?;
    assert_eq!(t.nbytes()?, 12);
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 3]}"#)?;
    assert_eq!(model.parameter_numel()?, 4 * 8 + 8 + 8 * 3 + 3);
    assert!(model.is_training()?);
    model.eval()?;
    assert!(!model.is_training()?);
    let opt = Optimizer::new(&mut model, r#"{"type": "sgd", "lr": 0.1}"#)?;
    assert!(!opt.step_was_skipped()?);
    let mut dl = DataLoader::from_tokens(&stream(50), r#"{"block_size": 4}"#)?;
    assert_eq!(dl.epoch()?, 0);
    dl.set_epoch(3)?;
    assert_eq!(dl.epoch()?, 3);
    Ok(())
}

#[test]
fn load_checkpoint_with_report() -> accel::Result<()> {
    let dir = std::env::temp_dir().join(format!("accel-rust-report-{}", std::process::id()));
    let mut acc = Accelerator::new(None)?;
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 3]}"#)?;
    acc.prepare(Some(&mut model), None, None, None)?;
    acc.save_model(&model, dir.to_str().unwrap(), None)?;
    let mut bigger = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 3, 3]}"#)?;
    assert_eq!(
        bigger.load_checkpoint_with_report(dir.to_str().unwrap(), None)?,
        r#"{"missing_keys": ["4.weight", "4.bias"], "unexpected_keys": [], "tied_keys": []}"#
    );
    let missing = dir.join("missing");
    assert_eq!(bigger.load_checkpoint_with_report(missing.to_str().unwrap(), None).unwrap_err().status(), Status::NotFound);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn pretrained_round_trip() -> accel::Result<()> {
    let dir = std::env::temp_dir().join(format!("accel-rust-pretrained-{}", std::process::id()));
    let folder = dir.to_str().unwrap();
    let mut model = Model::from_json(r#"{"type": "gpt", "vocab_size": 23, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 2}"#)?;
    model.save_pretrained(folder, Some(r#"{"max_shard_size": "10KB"}"#))?;
    assert!(dir.join("model.safetensors.index.json").exists());
    let (back, report) = Model::from_pretrained_with_report(folder, None)?;
    assert_eq!(report, r#"{"missing_keys": [], "unexpected_keys": [], "tied_keys": []}"#);
    assert_eq!(back.num_parameters()?, model.num_parameters()?);
    for i in 0..model.num_parameters()? {
        let name = model.parameter_name(i)?.to_string();
        assert_eq!(model.get_tensor(&name)?.to_vec::<f32>()?, back.get_tensor(&name)?.to_vec::<f32>()?, "{}", name);
    }
    match Model::from_pretrained(dir.join("missing").to_str().unwrap(), None) {
        Err(e) => assert_eq!(e.status(), Status::NotFound),
        Ok(_) => panic!("a missing folder loaded"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn forward_no_grad() -> accel::Result<()> {
    let mut acc = Accelerator::new(None)?;
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 3]}"#)?;
    acc.prepare(Some(&mut model), None, None, None)?;
    model.eval()?;
    let x = Tensor::from_slice(&[0.1f32, 0.2, 0.3, 0.4, 0.5, -0.5, 1.0, 2.0], &[2, 4])?;
    let a = model.forward(&x)?;
    let b = model.forward_no_grad(&x)?;
    assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn from_files_equals_from_tokens() -> accel::Result<()> {
    // The same 50 tokens as a uint16 token file: the same windows as from_tokens.
    let path = std::env::temp_dir().join(format!("accel_rust_tokens_{}.bin", std::process::id()));
    let bytes: Vec<u8> = (0..50u16).flat_map(|i| (i % 8).to_le_bytes()).collect();
    std::fs::write(&path, bytes).expect("write the token file");
    let config = format!(
        r#"{{"format": "tokens", "files": "{}", "dtype": "uint16", "block_size": 4, "batch_size": 2, "shuffle": true, "seed": 5}}"#,
        path.display()
    );
    let mut files = DataLoader::from_files(&config)?;
    let mut memory = DataLoader::from_tokens(&stream(50), r#"{"block_size": 4, "batch_size": 2, "shuffle": true, "seed": 5}"#)?;
    assert_eq!(files.len()?, memory.len()?);
    while let Some(a) = files.next_batch()? {
        let b = memory.next_batch()?.expect("as many batches");
        assert_eq!(a.inputs()?.to_vec::<i64>()?, b.inputs()?.to_vec::<i64>()?);
        assert_eq!(a.labels()?.expect("labels").to_vec::<i64>()?, b.labels()?.expect("labels").to_vec::<i64>()?);
    }
    std::fs::remove_file(&path).ok();
    let e = DataLoader::from_files(r#"{"format": "tokens", "files": "/nonexistent/t.bin", "dtype": "uint16", "block_size": 4}"#)
        .err()
        .expect("a missing file");
    assert_eq!(e.status(), Status::NotFound);
    assert!(e.message().contains("/nonexistent/t.bin"), "{}", e.message());
    Ok(())
}
