"""What llama_check.py and pretrained_check.py share: a case folder's inputs for the C driver (ids.bin, labels.bin:
int64 little-endian; params.txt: one line), the driver's run, and the checks of what accel wrote back (its losses,
save_pretrained's DIR/accel_out and its config.json) against tests/python/llama_reference.py."""
import json
import os
import struct
import subprocess
import sys

import torch


def write_inputs(d, params, ids, labels=None):
    for fname, t in (("ids.bin", ids), ("labels.bin", labels)):
        if t is not None:
            with open(os.path.join(d, fname), "wb") as f:
                f.write(t.numpy().astype("<i8").tobytes())
    with open(os.path.join(d, "params.txt"), "w") as f:
        f.write(params + "\n")


def run_driver(name, driver, mode, d):
    """The driver's `mode DIR`; None when it succeeded, else the failure's text."""
    r = subprocess.run([driver, mode, d], capture_output=True, text=True)
    return None if r.returncode == 0 else f"{name}: driver failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"


def read_losses(d, steps):
    with open(os.path.join(d, "accel_losses.bin"), "rb") as f:
        return list(struct.unpack(f"<{steps}d", f.read()))


def check_saved(R, config, d, trained, keys):
    """DIR/accel_out against the reference's trained weights and the config's values of `keys`: (failures, the largest
    weight difference, the names whose weights are not bit for bit the reference's)."""
    failures = []
    saved = R.read_folder(os.path.join(d, "accel_out"))
    names = [n for n, _ in R.layout(config)]
    if sorted(saved) != sorted(names):
        failures.append(f"saved keys differ: {sorted(set(saved) ^ set(names))}")
    w_err = max((saved[n] - trained[n]).abs().max().item() for n in names if n in saved)
    unequal = [n for n in names if n in saved and not torch.equal(saved[n], trained[n])]
    with open(os.path.join(d, "accel_out", "config.json")) as f:
        hf = json.load(f)
    norm = R.normalize(config)
    for k in keys:
        if hf.get(k) != norm[k]:
            failures.append(f"config.json {k}: {hf.get(k)!r}, want {norm[k]!r}")
    return failures, w_err, unequal, hf, norm


def exit_on(failure):
    if failure:
        sys.exit(failure)
