#!/usr/bin/env python3
"""`accel launch` configured by a cluster engine's variables, reproduced on one host: torchrun's PET_* variables
(as Kubeflow Trainer v2 and PyTorchJob with nprocPerNode set them for each node's launcher) and PyTorchJob v1's
form (RANK = the node's rank, WORLD_SIZE = every process, MASTER_ADDR/MASTER_PORT, PET_NPROC_PER_NODE). Two
launchers on this host play two nodes of one process each; the trained weights equal `accel launch -n 2` bit for
bit. PET_MAX_RESTARTS gives --max_restarts. Values accel cannot honour are refused (exit 2) naming the variable;
torchrun's --nnodes N is --num_machines (a MIN:MAX range, and PET_NNODES=MIN:MAX: test_elastic_nnodes.py).
Usage: test_cluster_env.py BUILD_DIR"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

BUILD = sys.argv[1]
ACCEL = os.path.join(BUILD, "bin", "accel")
PROG = os.path.join(BUILD, "tests", "distributed", "dist_train")
failures = []
tmp = tempfile.mkdtemp(prefix="accel_cluster_env_")
CLEAN = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT", "ACCELERATE_CONFIG_FILE")}
CLEAN["OMP_NUM_THREADS"] = "1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(flags, env, out, wait=True):
    cmd = [ACCEL, "launch", *flags, PROG, out, "4", "6"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                         env=dict(CLEAN, **env))
    return p.communicate(timeout=120) + (p.returncode,) if wait else p


def nodes(name, env_of_node):
    """Two launchers, nodes 0 and 1, each started with env_of_node(i); returns node 0's weights."""
    out = os.path.join(tmp, name + ".bin")
    procs = [launch([], env_of_node(i), out, wait=False) for i in (0, 1)]
    for i, p in enumerate(procs):
        text, _ = p.communicate(timeout=120)
        print("--- %s, node %d (exit %d)\n%s" % (name, i, p.returncode, text.strip()[-1500:]), flush=True)
        if p.returncode != 0:
            failures.append("%s: node %d failed (exit %d)" % (name, i, p.returncode))
    return open(out, "rb").read() if os.path.exists(out) else None


ref_out = os.path.join(tmp, "ref.bin")
text, _, code = launch(["-n", "2", "--main_process_port", "0"], {}, ref_out)
if code != 0:
    sys.exit("accel launch -n 2 failed:\n" + text)
ref = open(ref_out, "rb").read()

port = free_port()
got = nodes("torchrun_pet", lambda i: {"PET_NNODES": "2", "PET_NODE_RANK": str(i), "PET_MASTER_ADDR": "127.0.0.1",
                                       "PET_MASTER_PORT": str(port), "PET_NPROC_PER_NODE": "1"})
if got != ref:
    failures.append("PET_* variables: the weights differ from accel launch -n 2")
port = free_port()
got = nodes("pytorchjob_v1", lambda i: {"RANK": str(i), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                        "MASTER_PORT": str(port), "PET_NPROC_PER_NODE": "1"})
if got != ref:
    failures.append("PyTorchJob v1 variables: the weights differ from accel launch -n 2")

# RANK / WORLD_SIZE without PET_NPROC_PER_NODE (inherited from an outer launcher) change nothing.
text, _, code = launch(["-n", "2", "--main_process_port", "0"], {"RANK": "1", "WORLD_SIZE": "7"},
                       os.path.join(tmp, "inherited.bin"))
if code != 0 or open(os.path.join(tmp, "inherited.bin"), "rb").read() != ref:
    failures.append("RANK/WORLD_SIZE without PET_NPROC_PER_NODE changed the job (exit %d)" % code)

# PET_MAX_RESTARTS: a worker killed once, the job restarted and resumed (automatic checkpoint naming).
config = '{"project_config": {"project_dir": "%s", "automatic_checkpoint_naming": true}}' % os.path.join(tmp, "proj")
p = subprocess.run([ACCEL, "launch", "-n", "2", "--main_process_port", "0", PROG, os.path.join(tmp, "r.bin"), "4", "6",
                    config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120,
                   env=dict(CLEAN, PET_MAX_RESTARTS="1", ACCEL_TEST_ELASTIC="1", ACCEL_TEST_DIE_AT="2",
                            ACCEL_TEST_DIE_RANK="1"))
if p.returncode != 0 or "restart 1 of 1" not in p.stdout:
    failures.append("PET_MAX_RESTARTS=1: exit %d, expected one restart:\n%s" % (p.returncode, p.stdout[-1500:]))

# Refused, naming the variable: a range out of order, torchrun's "gpu" process count on a machine without GPUs
# (CI's), an etcd rendezvous, and a PyTorchJob WORLD_SIZE that is not a multiple of the processes per node.
for env, word in (({"PET_NNODES": "2:1"}, "PET_NNODES"), ({"PET_NPROC_PER_NODE": "gpu", "CUDA_VISIBLE_DEVICES": ""},
                                                          "PET_NPROC_PER_NODE=gpu"),
                  ({"PET_RDZV_BACKEND": "etcd"}, "PET_RDZV_BACKEND"),
                  ({"PET_NPROC_PER_NODE": "2", "WORLD_SIZE": "3", "RANK": "0"}, "WORLD_SIZE"),
                  ({"PET_MAX_RESTARTS": "-1"}, "PET_MAX_RESTARTS")):
    p = subprocess.run([ACCEL, "launch", "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=dict(CLEAN, **env), timeout=30)
    if p.returncode != 2 or word not in p.stderr:
        failures.append("%s: exit %d, expected 2 naming %s: %s" % (env, p.returncode, word, p.stderr.strip()[:300]))

# torchrun's --nnodes: "N" and "MIN:MAX" with MIN = MAX are --num_machines; a range with a machine rank (ranks
# follow arrival; test_elastic_nnodes.py runs ranges), a malformed value and a disagreement with --num_machines are refused naming the flag.
for flags in (["--nnodes", "1"], ["--nnodes=1:1"], ["--nnodes", "1", "--num_machines", "1"]):
    p = subprocess.run([ACCEL, "launch", *flags, "--main_process_port", "0", "true"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, env=CLEAN, timeout=60)
    if p.returncode != 0:
        failures.append("%s: exit %d, expected 0: %s" % (flags, p.returncode, p.stdout.strip()[:300]))
for flags, word in ((["--nnodes", "1:2", "--machine_rank", "0"], "--machine_rank"), (["--nnodes", "2:1"], "MIN is above MAX"),
                    (["--nnodes", "1:2:3"], "MIN:MAX"), (["--nnodes", "x"], "--nnodes (MIN)"),
                    (["--nnodes", "0"], "--nnodes (MIN)"), (["--nnodes", "2", "--num_machines", "3"], "disagree")):
    p = subprocess.run([ACCEL, "launch", *flags, "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=CLEAN, timeout=30)
    if p.returncode != 2 or word not in p.stderr or "--nnodes" not in p.stderr:
        failures.append("%s: exit %d, expected 2 with %r: %s" % (flags, p.returncode, word, p.stderr.strip()[:300]))

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    print("files kept in " + tmp)
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("cluster environments: torchrun's PET_* and PyTorchJob v1 on two local launchers train as accel launch -n 2")
