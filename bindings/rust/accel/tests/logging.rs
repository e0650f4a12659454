//! Logging from Rust (the multi-process checks are tests/distributed/dist_log.c): a closure receives the
//! messages of `accel::log::write` and libaccel's own warnings; the level filters them.
use accel::{log, Accelerator, Model, Status};
use std::sync::{Arc, Mutex};

#[test]
fn messages_reach_the_closure() -> accel::Result<()> {
    let seen: Arc<Mutex<Vec<(i32, String, i32, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    log::set_callback(move |level, name, rank, message| {
        sink.lock().unwrap().push((level, name.to_string(), rank, message.to_string()))
    });
    log::set_level(log::INFO)?;
    assert_eq!(log::level()?, log::INFO);
    log::write(None, "accel_test.train", log::INFO, "epoch 3", true, false)?;
    log::write(None, "accel_test.train", log::DEBUG, "hidden", false, false)?;
    let mut acc = Accelerator::new(None)?;
    log::write(Some(&mut acc), "accel_test.train", log::ERROR, "ordered", false, true)?;

    // A library warning: load_checkpoint of weights that miss keys, under the logger "accel".
    let dir = std::env::temp_dir().join(format!("accel-rust-log-{}", std::process::id()));
    let small = Model::from_json(r#"{"type": "mlp", "widths": [6, 16, 3]}"#)?;
    let mut big = Model::from_json(r#"{"type": "mlp", "widths": [6, 16, 3, 3]}"#)?;
    acc.save_model(&small, dir.to_str().unwrap(), None)?;
    big.load_checkpoint(dir.to_str().unwrap(), None)?;
    let _ = std::fs::remove_dir_all(&dir);

    let err = log::set_level(99).err().expect("an error");
    assert_eq!(err.status(), Status::InvalidArgument);
    log::reset_callback();
    log::set_level(log::WARNING)?;

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0], (log::INFO, "accel_test.train".to_string(), 0, "epoch 3".to_string()));
    assert_eq!(seen[1], (log::ERROR, "accel_test.train".to_string(), 0, "ordered".to_string()));
    assert_eq!((seen[2].0, seen[2].1.as_str()), (log::WARNING, "accel"));
    assert!(seen[2].3.contains("load_checkpoint") && seen[2].3.contains("4.weight"), "{}", seen[2].3);
    Ok(())
}
