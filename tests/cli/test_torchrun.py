#!/usr/bin/env python3
"""accel programs started by torchrun itself (`torchrun --no_python`, torch 1.13's spelling of 2.x's --no-python), as a
cluster engine that starts torchrun per node does: torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE)
and sets RANK / LOCAL_RANK / WORLD_SIZE / MASTER_*; the program needs no accel launch. A 2-process job trains to the
weights of `accel launch -n 2` bit for bit; the C example ends with accel launch's final loss; two torchrun "nodes"
on this host (--nnodes 2, static rendezvous) train as one torchrun of 2. Skipped (77) without torch.
Usage: test_torchrun.py BUILD_DIR"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError:
    print("skipped: this python has no torch (torchrun)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = sys.argv[1]
ACCEL = os.path.join(BUILD, "bin", "accel")
PROG = os.path.join(BUILD, "tests", "distributed", "dist_train")
EXAMPLE = os.path.join(BUILD, "examples", "train_mlp")
TORCHRUN = [sys.executable, os.path.join(HERE, "torch113_py311.py")]
failures = []
tmp = tempfile.mkdtemp(prefix="accel_torchrun_")
CLEAN = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "SLURM_", "TORCHELASTIC_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                             "MASTER_ADDR", "MASTER_PORT")}
CLEAN["OMP_NUM_THREADS"] = "1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=CLEAN,
                       timeout=150)
    print("--- %s (exit %d)\n%s" % (what, p.returncode, p.stdout.strip()[-1200:]), flush=True)
    if p.returncode != 0:
        failures.append("%s: exit %d" % (what, p.returncode))
    return p.stdout


def weights(name):
    path = os.path.join(tmp, name)
    return open(path, "rb").read() if os.path.exists(path) else None


run([ACCEL, "launch", "-n", "2", "--main_process_port", "0", PROG, os.path.join(tmp, "ref.bin"), "4", "6"],
    "accel launch -n 2")
ref = weights("ref.bin")
if ref is None:
    sys.exit("accel launch -n 2 wrote no weights")

run(TORCHRUN + ["--standalone", "--nnodes", "1", "--nproc_per_node", "2", "--no_python", PROG,
                os.path.join(tmp, "torchrun.bin"), "4", "6"], "torchrun --standalone --nproc_per_node 2 --no_python")
if weights("torchrun.bin") != ref:
    failures.append("torchrun --no_python: the weights differ from accel launch -n 2")

# Two torchrun "nodes" of one process each (a static rendezvous at one host's port, as a Slurm script runs one
# torchrun per node).
port = free_port()
nodes = [subprocess.Popen(TORCHRUN + ["--nnodes", "2", "--node_rank", str(i), "--nproc_per_node", "1",
                                      "--master_addr", "127.0.0.1", "--master_port", str(port), "--no_python", PROG,
                                      os.path.join(tmp, "nodes.bin"), "4", "6"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=CLEAN)
         for i in (0, 1)]
for i, p in enumerate(nodes):
    out, _ = p.communicate(timeout=150)
    print("--- torchrun node %d (exit %d)\n%s" % (i, p.returncode, out.strip()[-3000:]), flush=True)
    if p.returncode != 0:
        failures.append("torchrun --nnodes 2, node %d: exit %d" % (i, p.returncode))
if weights("nodes.bin") != ref:
    failures.append("two torchrun nodes: the weights differ from accel launch -n 2")

# The C example: the same final loss under torchrun as under accel launch.
if os.path.exists(EXAMPLE):
    def final_loss(text):
        m = re.search(r"^(?:\[rank0\]: )?final loss (\S+)", text, re.M)  # accel launch prefixes the rank
        return m.group(1) if m else None

    a = final_loss(run([ACCEL, "launch", "-n", "2", "--main_process_port", "0", EXAMPLE], "example, accel launch"))
    t = final_loss(run(TORCHRUN + ["--standalone", "--nproc_per_node", "2", "--no_python", EXAMPLE],
                       "example, torchrun --no_python"))
    if a is None or a != t:
        failures.append("the example's final loss: accel launch %s, torchrun %s" % (a, t))

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    print("files kept in " + tmp)
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("torchrun --no_python: accel programs train as under accel launch (1 node of 2, 2 nodes of 1, the example)")
