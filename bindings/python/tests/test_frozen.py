"""Frozen parameters through the Python binding: Model.set_requires_grad / requires_grad, the spec's "frozen", and
the refusals (a glob matching nothing, a change while an optimizer holds the parameters)."""
import accel
import pytest

MLP = '{"type": "mlp", "widths": [4, 8, 2]}'


def test_globs_and_spec():
    model = accel.Model.from_json(MLP)
    assert model.requires_grad("0.weight")
    model.set_requires_grad("0.*", False)
    assert not model.requires_grad("0.weight") and not model.requires_grad("0.bias") and model.requires_grad("2.weight")
    model.set_requires_grad("0.bias", True)
    assert model.requires_grad("0.bias")
    spec = accel.Model.from_json('{"type": "mlp", "widths": [4, 8, 2], "frozen": ["*.bias"]}')
    assert not spec.requires_grad("2.bias") and spec.requires_grad("2.weight")


def test_refusals():
    model = accel.Model.from_json(MLP)
    with pytest.raises(accel.InvalidArgumentError, match="matches no parameter"):
        model.set_requires_grad("encoder.*", False)
    with pytest.raises(accel.NotFoundError):
        model.requires_grad("9.weight")
    opt = accel.Optimizer(model, '{"type": "sgd", "lr": 0.1}')
    with pytest.raises(accel.FailedPreconditionError, match="optimizer"):
        model.set_requires_grad("0.*", False)
    del opt
