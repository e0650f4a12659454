"""accel_model_quantize through the Python binding: Model.quantize with a BnbQuantizationConfig, bitsandbytes'
state-dict keys, and the refusals (unknown keys by name, torch_dtype, a model quantized already)."""
import accel
import pytest

MLP = '{"type": "mlp", "widths": [64, 64, 4]}'


def test_4bit_keys_and_shapes():
    model = accel.Model.from_json(MLP)
    model.quantize('{"load_in_4bit": true, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true,'
                   ' "bnb_4bit_compute_dtype": "fp32"}')
    sd = model.state_dict()
    for key in ("0.weight.absmax", "0.weight.quant_map", "0.weight.nested_absmax", "0.weight.nested_quant_map",
                "0.weight.quant_state.bitsandbytes__nf4"):
        assert key in sd, key
    assert list(sd["0.weight"].shape) == [64 * 64 // 2, 1]
    assert "2.weight.absmax" not in sd  # the last top-level module stays float
    assert not model.requires_grad("0.weight")


def test_8bit_and_refusals():
    model = accel.Model.from_json(MLP)
    with pytest.raises(accel.InvalidArgumentError, match="load_in_3bit"):
        model.quantize('{"load_in_8bit": true, "load_in_3bit": true}')
    with pytest.raises(accel.UnimplementedError, match="torch_dtype"):
        model.quantize('{"load_in_8bit": true, "torch_dtype": "float16"}')
    with pytest.raises(accel.InvalidArgumentError, match="torch_dtype"):
        model.quantize('{"load_in_8bit": true, "torch_dtype": "bf16"}')
    model.quantize('{"load_in_8bit": true}')
    assert "0.SCB" in model.state_dict()
    with pytest.raises(accel.FailedPreconditionError, match="quantized already"):
        model.quantize('{"load_in_8bit": true}')
