"""LOMO through the Python binding: Accelerator.lomo_backward updates during backward (without clipping or
weight decay, the weights of a plain backward and an SGD step), the optimizer has no step, bad inputs raise."""
import accel
import pytest

MLP = '{"type": "mlp", "widths": [3, 4, 2]}'


def run(optimizer, use_lomo):
    accel.set_seed(7)
    acc = accel.Accelerator()
    model = accel.Model.from_json(MLP)
    opt = accel.Optimizer(model, optimizer)
    acc.prepare(model, opt)
    x = accel.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    y = accel.tensor([[1.0, -1.0], [0.0, 2.0]])
    loss = accel.compute_loss("mse", model.forward(x), y)
    if use_lomo:
        acc.lomo_backward(loss, 0.1)
    else:
        acc.backward(loss)
        opt.step()
    return acc, opt, model, model.get_tensor(model.parameter_name(0)).tolist()


def test_lomo_equals_sgd_and_refusals():
    _, _, _, want = run('{"type": "sgd", "lr": 0.1}', False)
    acc, opt, model, got = run('{"type": "lomo"}', True)
    flat = lambda rows: [v for r in rows for v in r]
    assert max(abs(a - b) for a, b in zip(flat(got), flat(want))) <= 1e-6
    with pytest.raises(accel.FailedPreconditionError, match="lomo_backward"):
        opt.step()
    x = accel.tensor([[0.5, -1.0, 2.0]])
    loss = accel.compute_loss("mse", model.forward(x), accel.tensor([[1.0, 0.0]]))
    with pytest.raises(accel.InvalidArgumentError, match="learning_rate"):
        acc.lomo_backward(loss, float("nan"))
