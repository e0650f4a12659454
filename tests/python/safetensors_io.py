"""safetensors files for the tests' Python references (llama_reference.py, lora_reference.py and, from
tests/capi, gpt_reference.py, frozen_reference.py, param_groups_reference.py), with torch only: one copy of the
format so that every reference reads and writes it the same way. The format, as Hugging Face's safetensors
writes it: an 8-byte little-endian header length, a JSON header (per tensor its dtype, shape and byte range in
the data; "__metadata__" {"format": "pt"} as torch's save_file writes it), padded with spaces to 8 bytes, then
the tensors' bytes, little-endian, in header order."""
import json
import struct

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
          torch.float64: "F64", torch.uint8: "U8", torch.int8: "I8"}
CODES = {v: k for k, v in DTYPES.items()}


def to_bytes(tensors):
    """The file's bytes for `tensors` (name -> tensor, written in this order)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        # bfloat16 has no numpy type: its bytes through an int16 view
        b = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write(path, tensors):
    with open(path, "wb") as f:
        f.write(to_bytes(tensors))


def read_with_dtypes(path):
    """name -> (dtype code as the file names it, e.g. "F32"; tensor), for checks of the stored dtype."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dtype = CODES[info["dtype"]]
        buf = bytearray(data[b:e])
        t = (torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16) if dtype == torch.bfloat16
             else torch.frombuffer(buf, dtype=dtype))
        out[name] = (info["dtype"], t.reshape(info["shape"]).clone())
    return out


def read(path):
    """name -> tensor."""
    return {name: t for name, (_, t) in read_with_dtypes(path).items()}
