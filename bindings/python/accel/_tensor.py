"""Tensor conversions: buffer protocol (bytes, array.array, memoryview), nested lists, numpy, DLPack."""

import array
import struct

from . import core as _core
from .errors import InvalidArgumentError

# dtype -> (struct/array format character, numpy dtype name)
_FORMATS = {
    _core.ACCEL_DTYPE_FLOAT32: ("f", "float32"),
    _core.ACCEL_DTYPE_FLOAT64: ("d", "float64"),
    _core.ACCEL_DTYPE_FLOAT16: ("e", "float16"),
    _core.ACCEL_DTYPE_INT8: ("b", "int8"),
    _core.ACCEL_DTYPE_UINT8: ("B", "uint8"),
    _core.ACCEL_DTYPE_INT16: ("h", "int16"),
    _core.ACCEL_DTYPE_INT32: ("i", "int32"),
    _core.ACCEL_DTYPE_INT64: ("q", "int64"),
    _core.ACCEL_DTYPE_BOOL: ("?", "bool"),
}
_BY_FORMAT = {"f": _core.ACCEL_DTYPE_FLOAT32, "d": _core.ACCEL_DTYPE_FLOAT64, "e": _core.ACCEL_DTYPE_FLOAT16,
              "b": _core.ACCEL_DTYPE_INT8, "B": _core.ACCEL_DTYPE_UINT8, "h": _core.ACCEL_DTYPE_INT16,
              "i": _core.ACCEL_DTYPE_INT32, "l": _core.ACCEL_DTYPE_INT64, "q": _core.ACCEL_DTYPE_INT64,
              "?": _core.ACCEL_DTYPE_BOOL}
_BY_NUMPY = {v[1]: k for k, v in _FORMATS.items()}


def _flatten(data):
    """Nested sequences -> (flat list, shape)."""
    if not isinstance(data, (list, tuple)):
        return [data], []
    if len(data) == 0:
        return [], [0]
    parts = [_flatten(d) for d in data]
    inner = parts[0][1]
    for _, s in parts:
        if s != inner:
            raise ValueError("tensor: ragged nested sequence (sub-shapes %r and %r)" % (inner, s))
    flat = [x for p, _ in parts for x in p]
    return flat, [len(data)] + inner


def tensor(data, dtype=None, shape=None):
    """A new Tensor holding a copy of ``data``.

    ``data`` may be a numpy array, anything with the buffer protocol (``shape`` defaults to the buffer's
    shape, ``dtype`` to its format), a nested list of numbers (float32 if any float else int64), or an
    accel.Tensor (returned as is).
    """
    if isinstance(data, _core.Tensor):
        return data
    if hasattr(data, "__array_interface__") and hasattr(data, "dtype"):  # numpy without importing it
        import numpy as np
        arr = np.ascontiguousarray(data)
        if dtype is not None:
            arr = arr.astype(_FORMATS[dtype][1], copy=False)
        code = _BY_NUMPY.get(str(arr.dtype))
        if code is None:
            raise ValueError("tensor: unsupported numpy dtype %s" % arr.dtype)
        return _core.Tensor.from_bytes(arr, code, list(arr.shape) if shape is None else list(shape))
    if isinstance(data, (list, tuple)):
        flat, inferred = _flatten(data)
        if dtype is None:
            dtype = _core.ACCEL_DTYPE_FLOAT32 if any(isinstance(x, float) for x in flat) else _core.ACCEL_DTYPE_INT64
        buf = array.array(_FORMATS[dtype][0], flat) if _FORMATS[dtype][0] not in "e?" else \
            struct.pack("=%d%s" % (len(flat), _FORMATS[dtype][0]), *flat)
        return _core.Tensor.from_bytes(buf, dtype, inferred if shape is None else list(shape))
    view = memoryview(data)
    fmt = view.format.lstrip("@=<")
    if dtype is None:
        dtype = _BY_FORMAT.get(fmt)
        if dtype is None:
            raise ValueError("tensor: unsupported buffer format %r; pass dtype=" % view.format)
    if shape is None:
        shape = list(view.shape) if view.format.lstrip("@=<") == _FORMATS[dtype][0] or fmt == "l" else \
            [view.nbytes // _core.dtype_size(dtype)]
    return _core.Tensor.from_bytes(view, dtype, list(shape))


def _shape(self):
    return tuple(self.size(d) for d in range(self.ndim()))


def _to_bytes(self):
    out = bytearray(self.nbytes())
    self.copy_to_bytes(out)
    return bytes(out)


# Names as numpy and torch spell them (bfloat16 has no struct/numpy format, so it is not in _FORMATS).
_NAMES = {code: name for code, (_, name) in _FORMATS.items()}
_NAMES[_core.ACCEL_DTYPE_BFLOAT16] = "bfloat16"
_BY_NAME = {name: code for code, name in _NAMES.items()}


def _dtype_code(dtype, what):
    """An ACCEL_DTYPE_* code from a code, a name ("float32") or a numpy dtype."""
    if isinstance(dtype, int):
        return dtype
    code = _BY_NAME.get(str(dtype))
    if code is None:
        raise InvalidArgumentError("%s: unknown dtype %r (expected one of %s)" % (what, dtype, ", ".join(_BY_NAME)))
    return code


def _target(self, dtype, what, no_format_hint):
    """The dtype to read as: `dtype`, else the tensor's own; refused where Python/numpy has no format for it."""
    to = self.dtype() if dtype is None else _dtype_code(dtype, what)
    if to not in _FORMATS:
        raise InvalidArgumentError("%s: %s has no %s; pass dtype=\"float32\" (exact for %s)"
                                   % (what, _NAMES.get(to, "dtype %d" % to), no_format_hint, _NAMES.get(to, to)))
    return to


def _read_as(self, to, what):
    """The elements as raw bytes of dtype `to`, converted by the typed accessors' rule (swig/dtypes.i)."""
    out = bytearray(self.numel() * _core.dtype_size(to))
    self.copy_as_dtype(to, out, what)
    return out


def _tolist(self, dtype=None):
    """The elements as (nested) Python numbers, read as `dtype` (default: the tensor's own; bfloat16 as
    float32, which holds it exactly). Another dtype converts only where every value is exact in it, as
    numpy's "safe" casting, and raises InvalidArgumentError naming both dtypes otherwise."""
    if dtype is None and self.dtype() == _core.ACCEL_DTYPE_BFLOAT16:
        dtype = _core.ACCEL_DTYPE_FLOAT32
    to = _target(self, dtype, "tolist", "Python number format")
    flat = list(struct.unpack("=%d%s" % (self.numel(), _FORMATS[to][0]), _read_as(self, to, "tolist")))
    shape = _shape(self)
    if not shape:
        return flat[0]

    def build(offset, dims):
        if len(dims) == 1:
            return flat[offset:offset + dims[0]]
        step = 1
        for d in dims[1:]:
            step *= d
        return [build(offset + i * step, dims[1:]) for i in range(dims[0])]
    return build(0, list(shape))


def _numpy(self, dtype=None):
    """A numpy array copy, of `dtype` (default: the tensor's own), by the same rule as tolist()."""
    import numpy as np
    to = _target(self, dtype, "numpy", "numpy dtype")
    arr = np.empty(_shape(self), dtype=_FORMATS[to][1])
    self.copy_as_dtype(to, arr, "numpy")
    return arr


def _dlpack(self, stream=None):
    if stream is not None:
        raise ValueError("__dlpack__: accel tensors live on the CPU; stream must be None")
    return self._to_dlpack_capsule()


def _dlpack_device(self):
    return (1, 0)  # kDLCPU, device 0


def _from_dlpack(obj):
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    return _core.Tensor._from_dlpack_capsule(capsule)


def _state_dict(self):
    return {self.state_dict_key(i): self.get_tensor(self.state_dict_key(i)) for i in range(self.state_dict_size())}


def _load_state_dict(self, state_dict, strict=True):
    entries = _core.StateDictEntries()
    keep = []
    for key, value in state_dict.items():
        t = tensor(value)
        keep.append(t)
        entries.add(key, t)
    self.load_state_dict_entries(entries, strict)


def _named_parameters(self):
    return [self.parameter_name(i) for i in range(self.num_parameters())]


def install(Tensor, Model):
    Tensor.shape = property(_shape, doc="Sizes of the dimensions (a tuple).")
    Tensor.to_bytes = _to_bytes
    Tensor.tolist = _tolist
    Tensor.numpy = _numpy
    Tensor.__dlpack__ = _dlpack
    Tensor.__dlpack_device__ = _dlpack_device
    Tensor.from_dlpack = staticmethod(_from_dlpack)
    Tensor.from_numpy = staticmethod(lambda arr: tensor(arr))
    Tensor.__len__ = lambda self: self.size(0)
    Tensor.__repr__ = lambda self: "accel.Tensor(shape=%r, dtype=%d)" % (_shape(self), self.dtype()) \
        if self.this is not None else "accel.Tensor(closed)"
    Model.state_dict = _state_dict
    Model.load_state_dict = _load_state_dict
    Model.parameter_names = _named_parameters
