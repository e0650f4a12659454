#!/usr/bin/env python3
"""The cluster examples of examples/clusters/ run on one host as their cluster engine would run them, and train as
`accel launch -n 2` does (the same loss at every epoch, printed to 4 digits, and the final loss to 8): the example
files are read here - the PyTorchJob's replicas, container command, env and port from the YAML manifest, the
sbatch script run as it is, its node count from its #SBATCH lines - so an example cannot drift from what is tested.
Each "node" is a launcher on this host: the pods get the variables Kubeflow's training operator sets (MASTER_ADDR
is the master pod's service name there, 127.0.0.1 here); the sbatch script gets Slurm's and a stand-in srun that
starts one task per node with SLURM_NODEID (the nodes are named by loopback addresses, 127.0.0.[1-2]).
Usage: test_cluster_examples.py BUILD_DIR"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import yaml

BUILD = os.path.abspath(sys.argv[1])
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "clusters")
tmp = tempfile.mkdtemp(prefix="accel_cluster_examples_")
failures = []
CLEAN = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT", "ACCELERATE_CONFIG_FILE")}
# The images' PATH: accel and the example programs.
CLEAN["PATH"] = os.pathsep.join([os.path.join(BUILD, "bin"), os.path.join(BUILD, "examples"), CLEAN.get("PATH", "")])
CLEAN["OMP_NUM_THREADS"] = "1"


def training_lines(text):
    """rank 0's epoch lines without their timings, and the final loss."""
    out = []
    for line in text.splitlines():
        m = re.search(r"(epoch \d+/\d+ .*lr [0-9.]+|final loss [0-9.]+)", line)
        if m:
            out.append(m.group(1))
    return out


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_nodes(name, cmds_envs):
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              env=dict(CLEAN, **env), cwd=tmp) for cmd, env in cmds_envs]
    texts = []
    for i, p in enumerate(procs):
        text, _ = p.communicate(timeout=120)
        print("--- %s, node %d (exit %d)\n%s" % (name, i, p.returncode, text.strip()[-1200:]), flush=True)
        if p.returncode != 0:
            failures.append("%s: node %d failed (exit %d)" % (name, i, p.returncode))
        texts.append(text)
    return texts


if not os.path.exists(os.path.join(BUILD, "examples", "train_mlp")):
    print("skipped: the examples are not built (ACCEL_BUILD_EXAMPLES=OFF)")
    sys.exit(77)
ref = subprocess.run([os.path.join(BUILD, "bin", "accel"), "launch", "--cpu", "-n", "2", "--main_process_port", "0",
                      os.path.join(BUILD, "examples", "train_mlp")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     universal_newlines=True, env=CLEAN, timeout=120)
ref_lines = training_lines(ref.stdout)
if ref.returncode != 0 or len(ref_lines) < 2:
    sys.exit("accel launch -n 2 train_mlp failed:\n" + ref.stdout)

# Kubeflow PyTorchJob: what the training operator sets in each pod (training-operator's pytorch envvar.go).
with open(os.path.join(EXAMPLES, "pytorchjob.yaml")) as f:
    job = yaml.safe_load(f)
spec = job["spec"]
nproc = int(spec["nprocPerNode"])
pods = []  # (command, container env), master first
for kind in ("Master", "Worker"):
    rs = spec["pytorchReplicaSpecs"].get(kind)
    for _ in range(int(rs["replicas"]) if rs else 0):
        (c,) = [c for c in rs["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        pods.append((c["command"] + c.get("args", []), {e["name"]: e["value"] for e in c.get("env", [])}))
master = spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
port = [p["containerPort"] for p in master.get("ports", []) if p.get("name") == "pytorchjob-port"][0]
if not port_free(port):
    port = free_port()  # another job on this host holds it; a pod has the port to itself
runs = []
for rank, (cmd, env) in enumerate(pods):
    operator_env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(len(pods) * nproc),
                    "RANK": str(rank), "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port),
                    "PET_NNODES": str(len(pods)), "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": str(nproc),
                    "PYTHONUNBUFFERED": "1"}
    runs.append((cmd, dict(operator_env, **env)))
texts = run_nodes("pytorchjob.yaml", runs)
if len(pods) * nproc != 2 or training_lines(texts[0]) != ref_lines:
    failures.append("pytorchjob.yaml: %d pods x %d processes; rank 0 printed %s, accel launch -n 2 printed %s"
                    % (len(pods), nproc, training_lines(texts[0]), ref_lines))

# Slurm: the sbatch script as it is, with the variables sbatch/srun set and a stand-in srun (one task per node).
script = os.path.join(EXAMPLES, "train.sbatch")
with open(script) as f:
    sbatch = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)", f.read(), re.M))
nodes = int(sbatch["nodes"])
bindir = os.path.join(tmp, "slurm-bin")
os.mkdir(bindir)
with open(os.path.join(bindir, "srun"), "w") as f:
    f.write("""#!/usr/bin/env python3
import os, subprocess, sys
n = int(os.environ["SLURM_NNODES"])
ps = [subprocess.Popen(sys.argv[1:], env=dict(os.environ, SLURM_NODEID=str(i), SLURM_PROCID=str(i),
                                              SLURM_LOCALID="0", SLURM_NTASKS=str(n))) for i in range(n)]
sys.exit(max(p.wait() for p in ps))
""")
os.chmod(os.path.join(bindir, "srun"), 0o755)
slurm_env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": sbatch["job-name"], "SLURM_NNODES": str(nodes),
             "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_JOB_NODELIST": "127.0.0.[1-%d]" % nodes,
             "SLURM_CPUS_PER_TASK": sbatch["cpus-per-task"], "MASTER_PORT": str(free_port()),
             "PATH": bindir + os.pathsep + CLEAN["PATH"]}
(text,) = run_nodes("train.sbatch", [(["bash", script], slurm_env)])
if training_lines(text) != ref_lines:
    failures.append("train.sbatch: rank 0 printed %s, accel launch -n 2 printed %s" % (training_lines(text), ref_lines))

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    print("files kept in " + tmp)
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("examples/clusters: the PyTorchJob manifest and the sbatch script train as accel launch -n 2 (%d lines equal)"
      % len(ref_lines))
