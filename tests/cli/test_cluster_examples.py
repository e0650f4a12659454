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

# Kubeflow Trainer v2: what the torch plugin of Trainer's controller sets in each pod of a TrainJob (its
# EnforceMLPolicy): numProcPerNode "auto" / "cpu" become the CPU limit when the resources ask for no GPU; a Secret's
# value (the rendezvous token) is the same random string in every pod.
with open(os.path.join(EXAMPLES, "trainjob.yaml")) as f:
    trainjob = yaml.safe_load(f)
trainer = trainjob["spec"]["trainer"]
assert trainjob["spec"]["runtimeRef"]["name"] == "torch-distributed"
nnodes = int(trainer["numNodes"])
nproc = str(trainer.get("numProcPerNode", "auto"))
limits = trainer.get("resourcesPerNode", {}).get("limits", {})
if nproc in ("auto", "cpu") and not any("gpu" in k.lower() for k in limits) and "cpu" in limits:
    nproc = str(max(1, int(limits["cpu"])))
secret = os.urandom(32).hex()
pod_env = {e["name"]: e["value"] if "value" in e else secret for e in trainer.get("env", [])}
port = 29400 if port_free(29400) else free_port()
runs = [(trainer["command"] + trainer.get("args", []),
         dict(pod_env, PET_NNODES=str(nnodes), PET_NPROC_PER_NODE=nproc, PET_NODE_RANK=str(i),
              PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port)))
        for i in range(nnodes)]
texts = run_nodes("trainjob.yaml", runs)
if training_lines(texts[0]) != ref_lines:
    failures.append("trainjob.yaml: %d pods, PET_NPROC_PER_NODE=%s; rank 0 printed %s, accel launch -n 2 printed %s"
                    % (nnodes, nproc, training_lines(texts[0]), ref_lines))

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

# Ray Train: the example run as it is, with a stand-in `ray` package whose TorchTrainer does what Ray Train's does
# in each worker (ray.train.torch's _TorchBackend.on_start and _set_torch_distributed_env_vars): MASTER_ADDR /
# MASTER_PORT, torch's process group opened on that port (rank 0 hosts its store), then RANK, LOCAL_RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE, NODE_RANK, ACCELERATE_TORCH_DEVICE and runtime_env's env_vars; each worker a "node" of its own.
# Without Python's torch here, a stand-in torch.distributed holds the port and broadcasts through a file.
RAY_STUB = {
    "ray/__init__.py": """
RUNTIME_ENV_VARS = {}
def init(runtime_env=None, **_):
    RUNTIME_ENV_VARS.update((runtime_env or {}).get("env_vars", {}))
""",
    "ray/train/__init__.py": """
import os
class ScalingConfig:
    def __init__(self, num_workers=1, use_gpu=False, **_):
        self.num_workers, self.use_gpu = num_workers, use_gpu
class _Context:
    def get_world_rank(self): return int(os.environ["RANK"])
    def get_world_size(self): return int(os.environ["WORLD_SIZE"])
    def get_local_rank(self): return int(os.environ["LOCAL_RANK"])
def get_context(): return _Context()
""",
    "ray/train/torch/__init__.py": """
import os, socket, traceback
import ray
import torch.distributed as dist
class TorchConfig:
    def __init__(self, backend=None, init_method="env", timeout_s=1800):
        self.backend = backend
class TorchTrainer:
    def __init__(self, train_loop_per_worker, train_loop_config=None, scaling_config=None, torch_config=None, **_):
        self.fn, self.config, self.scaling = train_loop_per_worker, train_loop_config, scaling_config
        self.backend = (torch_config.backend if torch_config else None) or "gloo"
    def fit(self):
        n = self.scaling.num_workers
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        pids = []
        for rank in range(n):
            pid = os.fork()
            if pid == 0:
                try:
                    os.environ.update(ray.RUNTIME_ENV_VARS)
                    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
                    dist.init_process_group(self.backend, init_method="env://", rank=rank, world_size=n)
                    os.environ.update(LOCAL_RANK="0", RANK=str(rank), LOCAL_WORLD_SIZE="1", WORLD_SIZE=str(n),
                                      NODE_RANK=str(rank), ACCELERATE_TORCH_DEVICE="cpu")
                    self.fn(self.config)
                    os._exit(0)
                except BaseException:
                    traceback.print_exc()
                    os._exit(1)
            pids.append(pid)
        failed = [r for r, pid in enumerate(pids) if os.waitpid(pid, 0)[1] != 0]
        if failed:
            raise RuntimeError("ray stand-in: workers %s failed" % failed)
""",
}
FAKE_TORCH = {
    "torch/__init__.py": "",
    "torch/distributed.py": """
import json, os, socket, time
_state = {"n": 0}
def init_process_group(backend, init_method="env://", rank=0, world_size=1, **_):
    _state.update(rank=rank)
    if rank == 0:  # rank 0 hosts the process group's store on MASTER_PORT, as torch's TCPStore does
        s = socket.socket()
        s.bind(("", int(os.environ["MASTER_PORT"])))
        s.listen()
        _state["store"] = s
def broadcast_object_list(objs, src=0):
    path = os.path.join(os.environ["FAKE_DIST_DIR"], "broadcast%d" % _state["n"])
    _state["n"] += 1
    if _state["rank"] == src:
        with open(path + ".tmp", "w") as f:
            json.dump(objs, f)
        os.rename(path + ".tmp", path)
        return
    while not os.path.exists(path):
        time.sleep(0.05)
    with open(path) as f:
        objs[:] = json.load(f)
""",
}
stub = os.path.join(tmp, "ray-stub")
try:
    import torch.distributed  # noqa: F401  (Debian's python3-torch: Ray's process group for real)
    stub_files = RAY_STUB
except ImportError:
    stub_files = dict(RAY_STUB, **FAKE_TORCH)
for rel, text in stub_files.items():
    os.makedirs(os.path.dirname(os.path.join(stub, rel)), exist_ok=True)
    with open(os.path.join(stub, rel), "w") as f:
        f.write(text)
(text,) = run_nodes("ray_train.py", [([sys.executable, os.path.join(EXAMPLES, "ray_train.py"), "train_mlp"],
                                      {"PYTHONPATH": stub, "FAKE_DIST_DIR": tmp, "PYTHONUNBUFFERED": "1"})])
if training_lines(text) != ref_lines:
    failures.append("ray_train.py: the workers printed %s, accel launch -n 2 printed %s" % (training_lines(text), ref_lines))

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    print("files kept in " + tmp)
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("examples/clusters: the PyTorchJob and TrainJob manifests, the sbatch script and the Ray Train script train as "
      "accel launch -n 2 "
      "(%d lines equal)"
      % len(ref_lines))
