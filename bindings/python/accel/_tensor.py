"""Tensor conversions: buffer protocol (bytes, array.array, memoryview), nested lists, numpy, DLPack."""

import array
import struct

from . import core as _core

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


def _tolist(self):
    fmt = _FORMATS.get(self.dtype(), (None,))[0]
    if fmt is None:
        raise ValueError("tolist: dtype %d has no Python equivalent; use to_bytes()" % self.dtype())
    raw = _to_bytes(self)
    flat = list(struct.unpack("=%d%s" % (self.numel(), fmt), raw))
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


def _numpy(self):
    import numpy as np
    name = _FORMATS.get(self.dtype(), (None, None))[1]
    if name is None:
        raise ValueError("numpy: dtype %d has no numpy equivalent" % self.dtype())
    arr = np.empty(_shape(self), dtype=name)
    self.copy_to_bytes(arr)
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
