//! Model::dispatch with disk offload (the C-level checks: tests/capi/test_dispatch.c): a llama with every module on
//! disk generates what it generated in memory; refusals keep their status.
use accel::{Model, Status, Tensor};

const SPEC: &str = r#"{"type": "llama", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 2, "num_attention_heads": 2, "initializer_range": 0.3}"#;

#[test]
fn disk_offload_generates_the_same_tokens() -> accel::Result<()> {
    let dir = std::env::temp_dir().join(format!("accel_rust_dispatch_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut model = Model::from_json(SPEC)?;
    let prompt = Tensor::from_slice(&[3i64, 1, 4, 1, 5], &[5])?;
    let want = model.generate(&prompt, Some(r#"{"max_new_tokens": 6}"#))?.to_vec::<i64>()?;
    let options = format!(r#"{{"offload_dir": "{}"}}"#, dir.display());
    model.dispatch(r#"{"": "disk"}"#, Some(&options))?;
    assert!(dir.join("index.json").exists());
    assert_eq!(model.generate(&prompt, Some(r#"{"max_new_tokens": 6}"#))?.to_vec::<i64>()?, want);
    assert_eq!(model.dispatch(r#"{"": "disk"}"#, Some(&options)).unwrap_err().status(), Status::FailedPrecondition);
    let mut other = Model::from_json(SPEC)?;
    assert_eq!(other.dispatch(r#"{"": "disk"}"#, None).unwrap_err().status(), Status::InvalidArgument);
    let e = other.load_checkpoint_and_dispatch("none.safetensors", Some(r#"{"device_map": "fastest"}"#)).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
