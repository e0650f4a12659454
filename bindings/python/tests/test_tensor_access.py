"""The typed accessors' rule (bindings/swig/dtypes.i, docs/guides/bindings/index.md): tolist(dtype=) and numpy(dtype=)
read a tensor as another dtype where every value of its dtype is exact there, and refuse otherwise with
InvalidArgumentError naming both dtypes."""

import struct

import pytest

import accel

NAMES = {accel.FLOAT32: "float32", accel.FLOAT64: "float64", accel.FLOAT16: "float16", accel.BFLOAT16: "bfloat16",
         accel.INT8: "int8", accel.UINT8: "uint8", accel.INT16: "int16", accel.INT32: "int32",
         accel.INT64: "int64", accel.BOOL: "bool"}

# Written out independently of dtypes.i: source dtype -> the dtypes that take it exactly (among the targets).
EXACT = {
    "float32": {"float32", "float64"}, "float64": {"float64"}, "float16": {"float32", "float64", "float16"},
    "bfloat16": {"float32", "float64"}, "int8": {"float32", "float64", "int32", "int64", "int8", "int16"},
    "uint8": {"float32", "float64", "int32", "int64", "uint8", "int16"},
    "int16": {"float32", "float64", "int32", "int64", "int16"}, "int32": {"float64", "int32", "int64"},
    "int64": {"int64"}, "bool": {"float32", "float64", "int32", "int64", "uint8", "int8", "int16", "bool"},
}
TARGETS = ["float32", "float64", "int32", "int64", "uint8", "int8", "int16", "float16", "bool"]

# Four values each dtype holds exactly.
VALUES = {
    "float32": [1.5, -2.25, 0.0, 3.0], "float64": [1.5, -2.25, 0.0, 1e300], "float16": [1.5, -2.25, 0.0, 3.0],
    "bfloat16": [1.5, -2.25, 0.0, 3.0], "int8": [1, -128, 0, 127], "uint8": [1, 255, 0, 3],
    "int16": [300, -32768, 0, 3], "int32": [100000, -2147483648, 0, 3], "int64": [1 << 40, -2, 0, 3],
    "bool": [True, False, True, True],
}
FORMATS = {"float32": "f", "float64": "d", "float16": "e", "int8": "b", "uint8": "B", "int16": "h", "int32": "i",
           "int64": "q", "bool": "?"}


def make(name):
    values = VALUES[name]
    if name == "bfloat16":
        raw = b"".join(struct.pack("=f", v)[2:] for v in values)  # the high half of the float32 (little-endian)
    else:
        raw = struct.pack("=%d%s" % (len(values), FORMATS[name]), *values)
    code = next(c for c, n in NAMES.items() if n == name)
    return accel.tensor(raw, dtype=code, shape=[len(values)])


@pytest.mark.parametrize("source", sorted(VALUES))
def test_every_dtype_through_tolist(source):
    t = make(source)
    assert NAMES[t.dtype()] == source
    # Default: the tensor's own dtype (bfloat16 as float32, exact).
    assert t.tolist() == VALUES[source]
    for target in TARGETS:
        if target in EXACT[source]:
            got = t.tolist(dtype=target)
            assert got == VALUES[source], (source, target)
            if target in ("float32", "float64", "float16") and source not in ("bool",):
                assert all(isinstance(v, float) for v in got)
        else:
            with pytest.raises(accel.InvalidArgumentError) as e:
                t.tolist(dtype=target)
            assert "dtype is %s, and %s cannot hold every %s value exactly" % (source, target, source) in str(e.value)


def test_reported_cases():
    t = accel.tensor([1, 2, 3, 4], dtype=accel.INT32)
    with pytest.raises(accel.InvalidArgumentError) as e:
        t.tolist(dtype="float32")
    assert str(e.value) == ("tolist: the tensor's dtype is int32, and float32 cannot hold every int32 value exactly; "
                            "read it as float64, int32, int64")
    assert t.tolist(dtype=accel.FLOAT64) == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(accel.InvalidArgumentError, match="tolist: unknown dtype 'float8'"):
        t.tolist(dtype="float8")
    with pytest.raises(accel.InvalidArgumentError, match="bfloat16 has no Python number format"):
        t.tolist(dtype="bfloat16")


def test_numpy_dtypes():
    np = pytest.importorskip("numpy")
    for source in sorted(VALUES):
        t = make(source)
        if source == "bfloat16":
            with pytest.raises(accel.InvalidArgumentError, match="bfloat16 has no numpy dtype"):
                t.numpy()
        else:
            assert t.numpy().dtype == np.dtype(source) and t.numpy().tolist() == VALUES[source]
        for target in TARGETS:
            if target in EXACT[source]:
                assert t.numpy(dtype=target).dtype == np.dtype(target)
                assert t.numpy(dtype=np.dtype(target)).tolist() == VALUES[source]
            else:
                with pytest.raises(accel.InvalidArgumentError, match="numpy: the tensor's dtype is %s" % source):
                    t.numpy(dtype=target)


def test_load_checkpoint_with_report(tmp_path):
    acc = accel.Accelerator()
    model = accel.Model.from_json('{"type": "mlp", "widths": [4, 8, 3]}')
    acc.prepare(model)
    acc.save_model(model, str(tmp_path), None)
    bigger = accel.Model.from_json('{"type": "mlp", "widths": [4, 8, 3, 3]}')
    assert bigger.load_checkpoint_with_report(str(tmp_path)) == \
        '{"missing_keys": ["4.weight", "4.bias"], "unexpected_keys": [], "tied_keys": []}'
    with pytest.raises(accel.NotFoundError):
        bigger.load_checkpoint_with_report(str(tmp_path / "missing"))


def test_forward_no_grad():
    """The same values as forward, without the autograd graph (issue 43.7): no backward through them."""
    acc = accel.Accelerator()
    model = accel.Model.from_json('{"type": "mlp", "widths": [4, 8, 3]}')
    acc.prepare(model)
    x = accel.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, -0.5, 1.0, 2.0]])
    y = accel.tensor([0, 2])
    model.eval()
    assert model.forward_no_grad(x).tolist() == model.forward(x).tolist()
    acc.backward(accel.compute_loss("cross_entropy", model.forward(x), y))
    with pytest.raises(accel.InvalidArgumentError, match="does not require grad"):
        acc.backward(accel.compute_loss("cross_entropy", model.forward_no_grad(x), y))


GPT = ('{"type": "gpt", "vocab_size": 23, "n_positions": 16, "n_embd": 16, "n_layer": 2, "n_head": 2,'
       ' "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}')


def test_pretrained_round_trip(tmp_path):
    """save_pretrained writes shards with the index; from_pretrained gives the same parameters, bit for bit."""
    model = accel.Model.from_json(GPT)
    model.save_pretrained(str(tmp_path / "gpt"), '{"max_shard_size": "10KB"}')
    assert (tmp_path / "gpt" / "model.safetensors.index.json").exists()
    back = accel.Model.from_pretrained(str(tmp_path / "gpt"))
    assert back.num_parameters() == model.num_parameters()
    for i in range(model.num_parameters()):
        name = model.parameter_name(i)
        assert back.get_tensor(name).numpy().tobytes() == model.get_tensor(name).numpy().tobytes(), name
    with pytest.raises(accel.NotFoundError, match="has no config.json"):
        accel.Model.from_pretrained(str(tmp_path))
    with pytest.raises(accel.FailedPreconditionError, match="no Hugging Face counterpart"):
        accel.Model.from_json('{"type": "mlp", "widths": [4, 3]}').save_pretrained(str(tmp_path / "mlp"))
