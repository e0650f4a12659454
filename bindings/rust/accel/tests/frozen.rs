//! Frozen parameters through the Rust crate: `Model::set_requires_grad` / `requires_grad`, the spec's "frozen", and
//! the refusals (a glob matching nothing, a change while an optimizer holds the parameters).
use accel::{Model, Optimizer, Status};

#[test]
fn frozen_parameters() -> accel::Result<()> {
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 2]}"#)?;
    assert!(model.requires_grad("0.weight")?);
    model.set_requires_grad("0.*", false)?;
    assert!(!model.requires_grad("0.weight")? && !model.requires_grad("0.bias")? && model.requires_grad("2.weight")?);
    let e = model.set_requires_grad("encoder.*", false).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("encoder.*"), "{}", e.message());
    assert_eq!(model.requires_grad("9.weight").unwrap_err().status(), Status::NotFound);
    {
        let _opt = Optimizer::new(&mut model, r#"{"type": "sgd", "lr": 0.1}"#)?;
    }
    let spec = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 2], "frozen": ["*.bias"]}"#)?;
    assert!(!spec.requires_grad("2.bias")? && spec.requires_grad("2.weight")?);
    Ok(())
}
