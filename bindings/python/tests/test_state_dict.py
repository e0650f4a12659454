"""Accelerator.get_state_dict from Python (the C-level checks: tests/capi/test_state_dict.c; 2 processes:
tests/distributed/dist_state_dict.c): a dict of key -> Tensor in the model's order, gathered from a sharded
model, copies, and a bad option named."""

import pytest

import accel

MODEL = '{"type": "mlp", "widths": [4, 8, 2]}'


def test_get_state_dict_of_a_sharded_model():
    acc = accel.Accelerator('{"fsdp_plugin": {"sharding_strategy": "FULL_SHARD"}}')
    model = accel.Model.from_json(MODEL)
    acc.prepare(model)
    sd = acc.get_state_dict(model)
    assert isinstance(sd, dict)
    assert list(sd) == [model.parameter_name(i) for i in range(model.num_parameters())]
    acc.summon_full_params_begin(model)
    try:
        for key, tensor in sd.items():
            assert tensor.tolist() == model.get_tensor(key).tolist(), key
    finally:
        acc.summon_full_params_end(model)
    # rank0_only / unwrap pass through: one process is process 0, and has no DDP wrapper.
    assert list(acc.get_state_dict(model, unwrap=False, rank0_only=False)) == list(sd)


def test_get_state_dict_is_a_copy_and_checks_its_arguments():
    acc = accel.Accelerator()
    model = accel.Model.from_json(MODEL)
    before = acc.get_state_dict(model)["0.weight"].tolist()
    model.load_state_dict({k: accel.tensor([[0.5] * 4] * 8) if k == "0.weight" else v
                           for k, v in model.state_dict().items()})
    assert acc.get_state_dict(model)["0.weight"].tolist() == [[0.5] * 4] * 8
    assert before != [[0.5] * 4] * 8
    with pytest.raises(accel.InvalidArgumentError, match="rank0_only"):
        acc.get_state_dict(model, rank0_only="yes")
