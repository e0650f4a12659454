"""Checkpoint folders interchangeable with the real Hugging Face Accelerate, both ways (issues 11 and 32).

The same training runs in accel (ckpt_interchange_driver.c) and in the real Accelerate 0.24.1 on Debian's
python3-torch (accelerate_peer.py, the package from tests/peers/), 1 and 2 processes (Gloo), for plain training,
gradient accumulation with a registered object, and bf16. Each saves after STEPS steps and trains STEPS more. Then:
  1. both train alike: the same losses and final weights, bit for bit, and every file both write (weights,
     optimizer, scheduler, RNG states, custom objects) holds the same values;
  2. Accelerate's load_state continues from accel's folder, and accel's from Accelerate's, bit for bit (losses
     and final weights) as each continues from its own;
  3. the forms only Accelerate 1.x writes (model.safetensors, "step", dl_state_dict.bin), which cannot run here
     (1.x needs torch >= 2), written from 1.x's source into a copy of Accelerate 0.24.1's folder: accel continues
     from them bit for bit;
  4. automatic checkpoint naming with total_limit 2 and three saves: the same folders kept, and load_state(None)
     of the other's project folder continues bit for bit.
Usage: accelerate_interchange.py DRIVER ACCEL_CLI PEER_PACKAGE_DIR WORKDIR"""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys

import numpy as np
import torch

DRIVER, CLI, PEER, WORK = sys.argv[1:5]
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 6  # even: a save between two optimizer steps under accumulation 2 (0.24.1 keeps no accumulation count)
VARIANTS = {"plain": [], "accum+custom": ["--accum", "2", "--custom"], "bf16": ["--bf16"], "auto-naming": ["--auto"]}
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
failures = []


def parse(out):
    lines = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[0] in ("loss", "cont") and f[-1].startswith(("0x", "-0x")):
            lines[(f[0], int(f[1]), int(f[2]))] = float.fromhex(f[3])
        elif len(f) == 3 and f[0] == "custom":
            lines[("custom", int(f[1]))] = int(f[2])
    return lines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_accel(nproc, *args):
    cmd = [DRIVER, *args] if nproc == 1 else [CLI, "launch", "-q", "-n", str(nproc), "--main_process_port", "0",
                                              DRIVER, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return ran_not(cmd, p.returncode, p.stdout + p.stderr)
    return parse(re.sub(r"(?m)^\[rank\d+\]: ", "", p.stdout))  # launch's prefix on the workers' lines


def run_peer(nproc, *args):
    """The real Accelerate: one process, or one per rank with torchrun's variables (Gloo on this CPU)."""
    env = dict(os.environ, PYTHONPATH=PEER, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    port = str(free_port())
    procs = []
    for rank in range(nproc):
        e = dict(env)
        if nproc > 1:
            e.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "accelerate_peer.py"), *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    lines, failed = {}, None
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode != 0:
            failed = failed or ran_not(["accelerate_peer.py", *args], p.returncode, out + err)
        lines.update(parse(out))
    return failed if failed is not None else lines


def ran_not(cmd, rc, output):
    """A run that failed is a failed check (every row of the table is still tried): its losses are missing."""
    expect(False, f"{' '.join(cmd)} exited with {rc}: {output.strip().splitlines()[-1] if output.strip() else ''}")
    return {}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BF16": torch.bfloat16}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=dtypes[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta


def write_safetensors(path, tensors):
    """safetensors' writer as Accelerate 1.x calls it (save_file(..., metadata={"format": "pt"})): F32 here."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        b = tensors[name].detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def final_weights(path):
    if not os.path.exists(path):
        return None  # its run failed
    if os.path.isdir(path):
        return read_safetensors(os.path.join(path, "model.safetensors"))[0]
    return torch.load(path)


def same(a, b):
    """Equal values, bit for bit: tensors by torch.equal, NumPy arrays by array_equal, containers by walk."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and
                a.shape == b.shape and torch.equal(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == b  # Python's optimizer defaults are ints (weight_decay=0) where the user's value may be a float
    return type(a) == type(b) and a == b


def diff_keys(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path}: keys {sorted(map(str, set(a) - set(b)))} only in accel's, {sorted(map(str, set(b) - set(a)))} only in Accelerate's"
        for k in a:
            d = diff_keys(a[k], b[k], f"{path}[{k!r}]")
            if d:
                return d
        return ""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff_keys(x, y, f"{path}[{i}]")
            if d:
                return d
        return ""
    return "" if same(a, b) else f"{path}: {a!r} != {b!r}"


def expect(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def losses(lines, kind, nproc):
    return [[lines.get((kind, r, s)) for s in range(STEPS)] for r in range(nproc)]


def same_losses(x, y, kind, nproc):
    a, b = losses(x, kind, nproc), losses(y, kind, nproc)
    return a == b and None not in sum(a, [])


def same_weights(p, q):
    a, b = final_weights(p), final_weights(q)
    return a is not None and b is not None and same(a, b)


def compare_files(accel_dir, peer_dir, nproc, tag):
    """Every file both write holds the same values (accel also writes dl_state_dict.bin and RNG's "step", as 1.x,
    and accel_checksums.json, its record of the files, which Accelerate does not read)."""
    if not (os.path.isdir(accel_dir) and os.path.isdir(peer_dir)):
        return expect(False, f"{tag}: both saved a folder")
    a_files, p_files = set(os.listdir(accel_dir)), set(os.listdir(peer_dir))
    expect(a_files - p_files == {"dl_state_dict.bin", "accel_checksums.json"} and p_files <= a_files,
           f"{tag}: accel writes Accelerate 0.24.1's files plus dl_state_dict.bin and accel_checksums.json "
           f"({sorted(a_files)} vs {sorted(p_files)})")
    for name in sorted(p_files):
        a, p = torch.load(os.path.join(accel_dir, name)), torch.load(os.path.join(peer_dir, name))
        if name.startswith("random_states_"):
            expect(a.pop("step", None) is not None, f"{tag}: {name} holds 1.x's \"step\"")
        if name.startswith("custom_checkpoint_"):
            a = json.loads(a)  # accel's registered objects are bytes: the driver's hold JSON text
        d = diff_keys(a, p)
        expect(not d, f"{tag}: {name} holds what Accelerate's holds{': ' + d if d else ''}")


def as_1x(src, dst, nproc):
    """Accelerate 1.x's forms of a 0.24.1 folder, from 1.x's checkpointing.py: model.safetensors (unprefixed keys),
    "step" in random_states_{i}.pkl, and a StatefulDataLoader's dl_state_dict.bin (torchdata's single-process
    iterator form)."""
    shutil.copytree(src, dst)
    sd = torch.load(os.path.join(dst, "pytorch_model.bin"))
    os.remove(os.path.join(dst, "pytorch_model.bin"))
    write_safetensors(os.path.join(dst, "model.safetensors"), sd)
    for rank in range(nproc):
        name = os.path.join(dst, f"random_states_{rank}.pkl")
        states = torch.load(name)
        torch.save({"step": STEPS, **states}, name)
    torch.save({"_index_sampler_state": None, "_sampler_iter_state": None, "_sampler_iter_yielded": STEPS,
                "_num_yielded": STEPS, "_IterableDataset_len_called": None, "_shared_seed": None,
                "fetcher_state": None, "dataset_state": None, "_iterator_finished": False},
               os.path.join(dst, "dl_state_dict.bin"))


for nproc in (1, 2):
    for variant, opts in VARIANTS.items():
        tag = f"{nproc} process{'es' if nproc > 1 else ''}, {variant}"
        d = lambda name: os.path.join(WORK, f"{name}_{nproc}_{variant}")
        a = run_accel(nproc, "save", d("accel"), str(STEPS), d("accel_final"), *opts)
        p = run_peer(nproc, "save", d("peer"), str(STEPS), d("peer_final.pt"), *opts)
        expect(same_losses(a, p, "loss", nproc) and same_losses(a, p, "cont", nproc),
               f"{tag}: accel and Accelerate train alike ({losses(a, 'cont', nproc)[0][:2]} vs {losses(p, 'cont', nproc)[0][:2]} ...)")
        expect(same_weights(d("accel_final"), d("peer_final.pt")), f"{tag}: the same final weights")
        auto = "--auto" in opts
        newest = lambda root: os.path.join(root, "checkpoints", "checkpoint_2") if auto else root
        if auto:
            kept = [sorted(os.listdir(os.path.join(d(w), "checkpoints"))) for w in ("accel", "peer")]
            expect(kept[0] == kept[1] == ["checkpoint_1", "checkpoint_2"],
                   f"{tag}: total_limit 2 keeps the same folders after 3 saves (accel {kept[0]}, Accelerate {kept[1]})")
        compare_files(newest(d("accel")), newest(d("peer")), nproc, tag)
        runs = {
            "accel continues accel's folder": (run_accel(nproc, "resume", d("accel"), str(STEPS), d("aa"), *opts), a, "aa", "accel_final"),
            "Accelerate continues accel's folder": (run_peer(nproc, "resume", d("accel"), str(STEPS), d("pa.pt"), *opts), a, "pa.pt", "accel_final"),
            "accel continues Accelerate's folder": (run_accel(nproc, "resume", d("peer"), str(STEPS), d("ap"), "--skip", str(STEPS), *opts), p, "ap", "peer_final.pt"),
            "Accelerate continues its own folder": (run_peer(nproc, "resume", d("peer"), str(STEPS), d("pp.pt"), *opts), p, "pp.pt", "peer_final.pt"),
        }
        if not auto:
            as_1x(d("peer"), d("peer1x"), nproc)
            runs["accel continues a 1.x-form folder"] = (
                run_accel(nproc, "resume", d("peer1x"), str(STEPS), d("a1x"), *opts), p, "a1x", "peer_final.pt")
        for what, (got, want, final, want_final) in runs.items():
            ok = same_losses(got, want, "cont", nproc) and same_weights(d(final), d(want_final))
            if "--custom" in opts:
                ok = ok and all(got.get(("custom", r)) == 2 * STEPS for r in range(nproc))
            expect(ok, f"{tag}: {what}: losses and final weights bit for bit")

if failures:
    sys.exit(f"{len(failures)} check(s) failed:\n" + "\n".join(failures))
print("ok")
