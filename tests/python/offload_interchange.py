"""Accelerate's offload folder, both ways, against the real Accelerate 0.24.1 (tests/peers/).

  offload_interchange.py DRIVER PEER_DIR WORK_DIR

1. accel writes a folder (offload_interchange_driver write); Accelerate's load_offloaded_weight and
   OffloadedWeightsLoader read every tensor back bit for bit, and accel's index.json is what json.dump(indent=2)
   writes for the same index.
2. Accelerate's offload_state_dict writes the same tensors; accel reads them bit for bit (driver check).
The pattern matches offload_interchange_driver.cpp. Skips (exit 0, a printed reason) when Accelerate cannot import.
"""
import json
import os
import shutil
import subprocess
import sys

DRIVER, PEER, WORK = sys.argv[1:4]
sys.path.insert(0, PEER)
try:
    import numpy as np
    import torch
    from accelerate.utils.offload import OffloadedWeightsLoader, load_offloaded_weight, offload_state_dict
except Exception as e:  # noqa: BLE001 - any import failure means the peer cannot run here
    print(f"SKIP: accelerate {PEER} cannot be imported here: {e!r}")
    sys.exit(0)

PATTERNS = [
    ("model.layers.0.self_attn.q_proj.weight", torch.float32, [3, 5]),
    ("h.f16", torch.float16, [7]),
    ("h.bf16", torch.bfloat16, [2, 3, 4]),
    ("h.f64", torch.float64, [4]),
    ("h.i64", torch.int64, [3]),
    ("h.i32", torch.int32, [2, 2]),
    ("h.i16", torch.int16, [5]),
    ("h.i8", torch.int8, [9]),
    ("h.u8", torch.uint8, [6]),
    ("h.bool", torch.bool, [10]),
    ("h.scalar", torch.float32, []),
    ("lm_head.weight", torch.bfloat16, [300]),
]


def pattern(k):
    _, dtype, shape = PATTERNS[k]
    numel = int(np.prod(shape)) if shape else 1
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    j = np.arange(nbytes, dtype=np.int64)
    b = ((j * 131 + k * 71 + (j >> 7) * 13 + 17) & 0xFF).astype(np.uint8)
    if dtype == torch.bool:
        b &= 1
    return torch.frombuffer(bytearray(b.tobytes()), dtype=dtype).reshape(shape).clone()


def same_bits(a, b):
    if a.dtype != b.dtype or list(a.shape) != list(b.shape):
        return False
    return a.reshape(-1).contiguous().view(torch.uint8).equal(b.reshape(-1).contiguous().view(torch.uint8))


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    failures = 0
    ours, theirs = os.path.join(WORK, "from_accel"), os.path.join(WORK, "from_accelerate")

    subprocess.run([DRIVER, "write", ours], check=True)
    with open(os.path.join(ours, "index.json")) as f:
        text = f.read()
    index = json.loads(text)
    if text != json.dumps(index, indent=2):
        print("DIFFERENT index.json layout from json.dump(indent=2):\n" + text)
        failures += 1
    loader = OffloadedWeightsLoader(save_folder=ours)
    for k, (name, _, _) in enumerate(PATTERNS):
        want = pattern(k)
        one = load_offloaded_weight(os.path.join(ours, name + ".dat"), index[name])
        ok = same_bits(one, want) and same_bits(loader[name], want)
        print(("same" if ok else "DIFFERENT") + " accel -> accelerate " + name)
        failures += not ok

    offload_state_dict(theirs, {name: pattern(k) for k, (name, _, _) in enumerate(PATTERNS)})
    r = subprocess.run([DRIVER, "check", theirs])
    failures += r.returncode != 0
    print("accelerate -> accel: " + ("same" if r.returncode == 0 else "DIFFERENT"))
    sys.exit(1 if failures else 0)


main()
