//! save_state / load_state pre-hooks as closures (the C-level checks: tests/capi/test_state_hooks.c): a save
//! hook's file lands in the checkpoint, a load hook reads it, a failing hook fails the call naming it, removal.
use accel::{Accelerator, Status};
use std::sync::{Arc, Mutex};

#[test]
fn state_hooks_add_and_read_files() -> accel::Result<()> {
    let dir = std::env::temp_dir().join(format!("accel_rust_state_hooks_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut acc = Accelerator::new(None)?;
    let save = acc.register_save_state_pre_hook(|folder, index| {
        std::fs::write(format!("{folder}/extra.txt"), format!("rank {index}")).map_err(|_| Status::PermissionDenied)
    })?;
    let log = seen.clone();
    acc.register_load_state_pre_hook(move |folder, _| {
        let text = std::fs::read_to_string(format!("{folder}/extra.txt")).map_err(|_| Status::NotFound)?;
        log.lock().unwrap().push(text);
        Ok(())
    })?;
    let ckpt = dir.join("ckpt");
    let ckpt = ckpt.to_str().unwrap();
    acc.save_state(ckpt)?;
    acc.load_state(ckpt)?;
    assert_eq!(*seen.lock().unwrap(), vec!["rank 0".to_string()]);

    acc.remove_state_hook(save)?;
    assert_eq!(acc.remove_state_hook(save).err().expect("an error").status(), Status::NotFound);
    let refuse = acc.register_save_state_pre_hook(|_, _| Err(Status::PermissionDenied))?;
    let refused = dir.join("refused");
    let err = acc.save_state(refused.to_str().unwrap()).err().expect("an error");
    assert_eq!(err.status(), Status::PermissionDenied);
    assert!(err.message().contains(&format!("pre-hook {} failed", refuse.0)), "{err}");
    assert!(!refused.exists());
    drop(acc);
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}

#[test]
fn save_writes_safetensors() -> accel::Result<()> {
    let path = std::env::temp_dir().join(format!("accel_rust_save_{}.safetensors", std::process::id()));
    let mut acc = Accelerator::new(None)?;
    let w = accel::Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    acc.save(&[("w", &w)], path.to_str().unwrap())?;
    let data = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&data[8..8 + n]).unwrap();
    assert!(header.contains(r#""w":{"dtype":"F32","shape":[2,2]"#), "{header}");
    assert_eq!(data.len(), 8 + n + 16);
    std::fs::remove_file(&path).unwrap();
    Ok(())
}
