//! Accelerator::get_state_dict (the C-level checks: tests/capi/test_state_dict.c): a sharded model's whole
//! state dict in one call, its keys in the model's order with the values read inside summon_full_params, and a
//! bad option named.
use accel::{Accelerator, Model, Status};

#[test]
fn get_state_dict_in_one_call() -> accel::Result<()> {
    let mut acc = Accelerator::new(Some(r#"{"fsdp_plugin": {"sharding_strategy": "FULL_SHARD"}}"#))?;
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [4, 8, 2]}"#)?;
    acc.prepare(Some(&mut model), None, None, None)?;
    let sd = acc.get_state_dict(&model, None)?;
    assert_eq!(sd.len(), model.num_parameters()?);
    acc.summon_full_params_begin(&mut model)?;
    for (i, (key, tensor)) in sd.iter().enumerate() {
        assert_eq!(key.as_str(), model.parameter_name(i)?);
        assert_eq!(tensor.to_vec::<f32>()?, model.get_tensor(key)?.to_vec::<f32>()?);
    }
    acc.summon_full_params_end(&mut model)?;
    let err = acc.get_state_dict(&model, Some(r#"{"rank0_onl": true}"#)).err().expect("an error");
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("rank0_onl"), "{err}");
    Ok(())
}
