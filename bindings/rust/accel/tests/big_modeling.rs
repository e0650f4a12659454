//! Model::infer_auto_device_map / compute_module_sizes / check_device_map on an empty model (the C-level checks:
//! tests/unit/big_modeling, tests/python/device_map_reference.py).
use accel::{Model, Status};

const SPEC: &str = r#"{"type": "sequential", "empty_init": true, "layers": [
    {"type": "linear", "in_features": 4, "out_features": 4}, {"type": "relu"},
    {"type": "linear", "in_features": 4, "out_features": 4}, {"type": "linear", "in_features": 4, "out_features": 2}]}"#;

#[test]
fn device_map_of_an_empty_model() -> accel::Result<()> {
    let model = Model::from_json(SPEC)?;
    assert_eq!(
        model.infer_auto_device_map(Some(r#"{"max_memory": {"cpu": 170}}"#))?,
        r#"{"0":"cpu","1":"cpu","2":"disk","3":"disk"}"#
    );
    let sizes = model.compute_module_sizes(None)?;
    assert!(sizes.starts_with(r#"{"sizes":{"":200,"0":80,"#), "{}", sizes);
    assert!(sizes.ends_with(r#""max_layer_size":80,"max_layer_names":["0","2"]}"#), "{}", sizes);
    model.check_device_map(r#"{"": "disk"}"#)?;
    assert_eq!(model.check_device_map(r#"{"0": 0}"#).unwrap_err().status(), Status::InvalidArgument);
    let e = model.infer_auto_device_map(Some(r#"{"max_memory": {"gpu": 1}}"#)).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    Ok(())
}
