"""Which file of a weights folder accel_model_load_checkpoint reads, against the real Accelerate 0.24.1's
load_checkpoint_in_model (utils/modeling.py), on folders where the choice shows: a whole file beside shards of
another save (a sharded save_model over an older whole one), pytorch_model.bin beside model.safetensors, shards
only, two index files, a path to an index file. Each file of a folder holds its own value (every element of every
tensor), so the values a model ends with name the file that was read; both must read the same one, or both refuse.

accel runs through ctypes (libaccel; the Accel helper of transformers_real_check.py), the real Accelerate in this
process from tests/peers/ on Debian's python3-torch. safetensors (the Python package) is not installed here, so a
stand-in `safetensors` package (safe_open / torch.load_file over safetensors_io.py, the tests' one copy of the
format) is put on sys.path: it only reads the files, which of them is chosen is Accelerate's own code.
transformers is not installed either: from_pretrained's order (model.safetensors, its index, pytorch_model.bin,
its index) stays checked from transformers' source, by the unit test WeightsFolderOrder.*.
Usage: weights_folder_order.py LIBACCEL PEER_PACKAGE_DIR WORKDIR. ~1.2 s."""
import json
import os
import shutil
import sys
import textwrap

import torch

LIB, PEER, WORK = sys.argv[1:4]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402  (beside this file)
from transformers_real_check import Accel  # noqa: E402

SPEC = {"type": "sequential", "layers": [{"type": "linear", "in_features": 3, "out_features": 2}]}
KEYS = ("0.weight", "0.bias")
# Each file's value: the value a loaded tensor holds names the file it came from.
VALUES = {"pytorch_model.bin": 1.0, "model.safetensors": 2.0, "bin shards": 3.0, "safetensors shards": 4.0}


def state(value):
    return {"0.weight": torch.full((2, 3), value), "0.bias": torch.full((2,), value)}


def whole(d, safe):
    name = "model.safetensors" if safe else "pytorch_model.bin"
    sd = state(VALUES[name])
    if safe:
        safetensors_io.write(os.path.join(d, name), sd)
    else:
        torch.save(sd, os.path.join(d, name))


def shards(d, safe):
    """Two shards (one key each) and their index, named as save_model / save_pretrained name them."""
    sd = state(VALUES["safetensors shards" if safe else "bin shards"])
    stem, ext = ("model", ".safetensors") if safe else ("pytorch_model", ".bin")
    weight_map = {}
    for i, key in enumerate(KEYS):
        name = f"{stem}-{i + 1:05d}-of-{len(KEYS):05d}{ext}"
        if safe:
            safetensors_io.write(os.path.join(d, name), {key: sd[key]})
        else:
            torch.save({key: sd[key]}, os.path.join(d, name))
        weight_map[key] = name
    with open(os.path.join(d, f"{stem}{ext}.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 32}, "weight_map": weight_map}, f)


# name -> (what the folder holds, the path to load relative to the folder)
FOLDERS = {
    "bin+bin_shards": ((("whole", False), ("shards", False)), ""),
    "safetensors+safetensors_shards": ((("whole", True), ("shards", True)), ""),
    "bin+safetensors": ((("whole", False), ("whole", True)), ""),
    "safetensors+bin_shards": ((("whole", True), ("shards", False)), ""),
    "safetensors_shards_only": ((("shards", True),), ""),
    "bin_shards_only": ((("shards", False),), ""),
    "index_path_beside_whole": ((("whole", True), ("shards", True)), "model.safetensors.index.json"),
    "two_indexes": ((("shards", False), ("shards", True)), ""),
    "two_indexes+safetensors": ((("whole", True), ("shards", False), ("shards", True)), ""),
    "empty": ((), ""),
}


def build(name):
    d = os.path.join(WORK, name)
    os.makedirs(d)
    for kind, safe in FOLDERS[name][0]:
        (whole if kind == "whole" else shards)(d, safe)
    return os.path.join(d, FOLDERS[name][1]) if FOLDERS[name][1] else d


def source(tensors):
    """Which file each key's value came from ("untouched" when none), e.g. "model.safetensors"."""
    names = []
    for key in KEYS:
        t = tensors[key]
        hit = [n for n, v in VALUES.items() if bool((t == v).all())]
        names.append(hit[0] if hit else "untouched")
    return names[0] if len(set(names)) == 1 else "/".join(names)


def safetensors_stand_in():
    """A `safetensors` package Accelerate can import (it also asks importlib.metadata for its version)."""
    root = os.path.join(WORK, "stand_in")
    pkg = os.path.join(root, "safetensors")
    os.makedirs(pkg)
    os.makedirs(os.path.join(root, "safetensors-0.0.0.dist-info"))
    with open(os.path.join(root, "safetensors-0.0.0.dist-info", "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: safetensors\nVersion: 0.0.0\n")
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write(textwrap.dedent("""\
            import json, struct
            class safe_open:
                def __init__(self, path, framework="pt", device="cpu"):
                    with open(path, "rb") as f:
                        (n,) = struct.unpack("<Q", f.read(8))
                        self.header = json.loads(f.read(n))
                def __enter__(self):
                    return self
                def __exit__(self, *exc):
                    return False
                def metadata(self):
                    return self.header.get("__metadata__")
                def keys(self):
                    return [k for k in self.header if k != "__metadata__"]
            """))
    with open(os.path.join(pkg, "torch.py"), "w") as f:
        f.write(textwrap.dedent("""\
            import safetensors_io
            def load_file(path, device="cpu"):
                return safetensors_io.read(path)
            def save_file(tensors, path, metadata=None):  # imported by accelerate.utils.other; unused here
                safetensors_io.write(path, tensors)
            """))
    return root


def accelerate_reads(path):
    from accelerate.utils import load_checkpoint_in_model
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.0)
    try:
        load_checkpoint_in_model(model, path)
    except ValueError as e:
        return "refused", str(e)
    return source(model.state_dict()), ""


def accel_reads(lib, path):
    model = lib.handle(lib.lib.accel_model_create_from_json, "create", json.dumps(SPEC).encode())
    try:
        status = lib.lib.accel_model_load_checkpoint(model, path.encode(), None)
        if status != 0:
            return "refused", lib.lib.accel_last_error_message().decode()
        got = {}
        for key in KEYS:
            h = lib.handle(lib.lib.accel_model_get_tensor, f"get_tensor({key})", model, key.encode())
            try:
                got[key] = lib.to_torch(h)
            finally:
                lib.lib.accel_tensor_free(h)
        return source(got), ""
    finally:
        lib.lib.accel_model_free(model)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    sys.path[:0] = [PEER, safetensors_stand_in()]
    lib = Accel(LIB)
    failures = []
    for name in FOLDERS:
        path = build(name)
        (ref, ref_msg), (got, msg) = accelerate_reads(path), accel_reads(lib, path)
        print(f"{name:32s} Accelerate: {ref:20s} accel: {got}")
        for m in (ref_msg, msg):
            if m:
                print(f"{'':34s}{m}")
        if ref != got:
            failures.append(f"{name}: Accelerate read {ref}, accel {got}")
    if failures:
        sys.exit("weights_folder_order: " + "; ".join(failures))
    print("weights_folder_order: accel reads every folder as Accelerate's load_checkpoint_in_model")


if __name__ == "__main__":
    main()
