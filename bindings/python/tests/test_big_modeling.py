"""Model.infer_auto_device_map / compute_module_sizes / check_device_map on an empty model (the C-level checks:
tests/unit/big_modeling, tests/python/device_map_reference.py against Accelerate)."""

import json

import pytest

import accel

SPEC = ('{"type": "sequential", "empty_init": true, "layers": ['
        '{"type": "linear", "in_features": 4, "out_features": 4}, {"type": "relu"},'
        '{"type": "linear", "in_features": 4, "out_features": 4}, {"type": "linear", "in_features": 4, "out_features": 2}]}')


def test_device_map_of_an_empty_model():
    model = accel.Model.from_json(SPEC)
    assert json.loads(model.infer_auto_device_map('{"max_memory": {"cpu": 170}}')) == \
        {"0": "cpu", "1": "cpu", "2": "disk", "3": "disk"}
    sizes = json.loads(model.compute_module_sizes())
    assert sizes["sizes"][""] == 200 and sizes["max_layer_size"] == 80 and sizes["max_layer_names"] == ["0", "2"]
    model.check_device_map('{"": "disk"}')
    with pytest.raises(accel.InvalidArgumentError, match="does not give any device"):
        model.check_device_map('{"0": 0}')
    with pytest.raises(accel.InvalidArgumentError, match="not recognized"):
        model.infer_auto_device_map('{"max_memory": {"gpu": 1}}')
    with pytest.raises(accel.FailedPreconditionError, match="meta device"):
        model.forward(accel.tensor([[1.0, 2.0, 3.0, 4.0]]))
