#!/usr/bin/env python3
"""`accel launch --nnodes 1:2` (torchrun's elastic membership) with two launchers on one host as two machines:
launcher A hosts the agent store, B joins, round 0 trains with world size 2 (tests/distributed/dist_train with
ACCEL_TEST_ELASTIC=1: automatic checkpoint naming, a save after every step, load_latest_state at the start). Then
machine B disappears (its launcher and workers SIGKILLed as one process group): A's workers fail in their
collectives, A forms round 1 alone (world size 1) and the program resumes from the newest complete checkpoint and
finishes. Prints the restart time (the kill to the survivor's first step after the resume) and the work lost (steps
between the newest checkpoint at the kill and the resume point). Also: a machine that comes late is admitted at
the next round (the running round is ended for it; that machine's launcher is configured by torchrun's PET_NNODES=1:2
and PET_RDZV_* variables, as Kubeflow sets them), and launchers with another rendezvous token or none are refused;
bad --nnodes/--rdzv_conf values are refused by name.
Usage: test_elastic_nnodes.py BUILD_DIR"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.path.abspath(sys.argv[1])
ACCEL = os.path.join(BUILD, "bin", "accel")
PROG = os.path.join(BUILD, "tests", "distributed", "dist_train")
STEPS = 200
tmp = tempfile.mkdtemp(prefix="accel_elastic_nnodes_")
failures = []
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith(("PET_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT", "ACCELERATE_CONFIG_FILE")}
ENV.update(OMP_NUM_THREADS="1", ACCEL_TEST_ELASTIC="1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launcher:
    def __init__(self, name, port, project, extra=(), env=None, flags=None):
        """flags: the launcher's flags, else the elastic ones of this test (env may give them as PET_* instead)."""
        config = '{"project_config": {"project_dir": "%s", "automatic_checkpoint_naming": true, "total_limit": 3}}' % project
        self.out = os.path.join(tmp, name + ".bin")
        if flags is None:
            flags = ["-n", "2", "--nnodes", "1:2", "--main_process_port", str(port), "--max_restarts", "1",
                     "--rdzv_conf", "last_call_timeout=3,join_timeout=60"]
        cmd = [ACCEL, "launch", *flags, *extra, PROG, self.out, "4", str(STEPS), config]
        self.name, self.lines = name, []
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                  env=dict(ENV, **(env or {})), start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def text(self):
        return "\n".join(l for _, l in self.lines)

    def wait_for(self, pattern, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            for t, l in self.lines:
                if re.search(pattern, l):
                    return t, l
            if self.p.poll() is not None and not self.p.stdout.readable():
                break
            time.sleep(0.02)
        return None

    def finish(self, timeout=120):
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        time.sleep(0.2)
        print("--- launcher %s (exit %s)\n%s" % (self.name, self.p.returncode, self.text()[-3000:]), flush=True)
        return self.p.returncode


def newest_checkpoint(project):
    d = os.path.join(project, "checkpoints")
    ks = [int(m.group(1)) for m in (re.match(r"checkpoint_(\d+)$", n) for n in os.listdir(d) if os.path.isdir(d))
          if m] if os.path.isdir(d) else []
    return max(ks) if ks else -1


# 1. Two machines, one disappears: the survivor goes on alone from the checkpoint.
port, project = free_port(), os.path.join(tmp, "proj")
a = Launcher("A", port, project)
if not a.wait_for(r"elastic rendezvous at .*hosted by this launcher", 30):
    failures.append("launcher A did not host the agent store")
b = Launcher("B", port, project)
if not (a.wait_for(r"elastic round 0: 2 nodes", 30) and b.wait_for(r"elastic round 0: 2 nodes .* this node 1", 30)):
    failures.append("round 0 did not form with 2 nodes")
end = time.time() + 60
while newest_checkpoint(project) < 20 and time.time() < end and a.p.poll() is None:
    time.sleep(0.01)
ckpt_at_kill = newest_checkpoint(project)
t_kill = time.time()
os.killpg(b.p.pid, signal.SIGKILL)
code = a.finish()
b.finish(10)
text = a.text()
resumed = re.findall(r"(?:\[rank0\]: )?elastic: round 1 of max 1, run id none: resumed at step (\d+)", text)
first = a.wait_for(r"first step after resume", 1)
if code != 0:
    failures.append("the survivor failed (exit %s)" % code)
if not re.search(r"elastic round 1: 1 node \(--nnodes 1:2\), this node 0, world size 1", text):
    failures.append("no round 1 with world size 1 on the survivor")
if len(resumed) != 1 or int(resumed[0]) < ckpt_at_kill:
    failures.append("the survivor resumed at %s, expected one resume at a step >= %d (the checkpoints at the kill)"
                    % (resumed, ckpt_at_kill))
if not os.path.exists(a.out):
    failures.append("the survivor wrote no final weights")
if first and resumed:
    print("elastic --nnodes 1:2, a machine lost at checkpoint %d: restart %.2f s (the kill to the first step of "
          "world size 1, incl. last_call_timeout 3 s), resumed at step %s"
          % (ckpt_at_kill, first[0] - t_kill, resumed[0]), flush=True)

# 2. A machine that comes late (round 0 closed without it) is admitted: the running round ends and round 1 has 2.
# The job's launchers share a rendezvous token: launchers with another token or none come first, are refused (the
# host names their address) and never join; the job is unharmed.
port, project = free_port(), os.path.join(tmp, "proj_late")
token = {"ACCEL_RDZV_TOKEN": os.urandom(32).hex()}
a = Launcher("A_late", port, project, env=token)
a.wait_for(r"elastic round 0: 1 node ", 30)
a.wait_for(r"resumed at step|fresh start", 30)
intruders = [Launcher(name, port, os.path.join(tmp, "proj_" + name), env=env)
             for name, env in (("wrong_token", {"ACCEL_RDZV_TOKEN": os.urandom(32).hex()}), ("no_token", {}))]
# The late machine starts with the intruders, not after them: waiting for their refusals first let A's whole run
# (STEPS steps) end before B arrived, and B then found no round to join.
# B is configured as Kubeflow Trainer v2 / PyTorchJob's elasticPolicy configure torchrun: PET_NNODES=MIN:MAX with
# the rendezvous in PET_RDZV_* (its PET_NODE_RANK is not read: ranks follow the arrival).
pet = {"PET_NNODES": "1:2", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": "1", "PET_MAX_RESTARTS": "1",
       "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "127.0.0.1:%d" % port,
       "PET_RDZV_CONF": "last_call_timeout=3,join_timeout=60"}
b = Launcher("B_late", port, project, env=dict(token, **pet), flags=[])
for x in intruders:
    code_x = x.finish(60)
    if code_x == 0 or "elastic round" in x.text() or "127.0.0.1:%d" % port not in x.text():
        failures.append("a launcher (%s): exit %s, expected a refusal naming the store 127.0.0.1:%d"
                        % (x.name, code_x, port))
# (LibTorch's client opens two connections: one asks, one waits for callbacks and is refused when it closes.)
for why in ("it did not prove the job's rendezvous token", "it is not accel's rendezvous client"):
    if not a.wait_for(r"refused the connection from 127\.0\.0\.1:\d+: " + why, 10):
        failures.append("the host did not name a refused launcher's address with: " + why)
ok = a.wait_for(r"elastic round 1: 2 nodes", 60) and b.wait_for(r"elastic round 1: 2 nodes .* this node 1", 60)
code_a, code_b = a.finish(), b.finish()
if not ok or code_a != 0 or code_b != 0 or "a node is waiting to join" not in a.text():
    failures.append("a late machine: not admitted at round 1 (exits %s, %s)" % (code_a, code_b))
if "rendezvous token proven" not in b.text():
    failures.append("the late machine did not prove the token")

# 3. Values refused by name.
for flags, word in ((["--nnodes", "1:2", "--machine_rank", "1"], "--machine_rank"),
                    (["--machine_rank", "1", "PET_NNODES=1:2"], "PET_NNODES=MIN:MAX: machine ranks"),
                    (["--main_process_port", "0", "PET_NNODES=1:2"], "PET_NNODES=MIN:MAX needs a fixed"),
                    (["--nnodes", "1:2", "--main_process_port", "0"], "--main_process_port"),
                    (["--nnodes", "1:2", "-n", "3"], "--nnodes MAX"),
                    (["--rdzv_conf", "timeout=5"], "timeout"), (["--rdzv_conf", "join_timeout=x"], "join_timeout")):
    env = dict(ENV, **dict(f.split("=", 1) for f in flags if f.startswith("PET_")))
    p = subprocess.run([ACCEL, "launch", *[f for f in flags if not f.startswith("PET_")], "true"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env, timeout=30)
    if p.returncode != 2 or word not in p.stderr:
        failures.append("%s: exit %d, expected 2 naming %s: %s" % (flags, p.returncode, word, p.stderr.strip()[:300]))

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    print("files kept in " + tmp)
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("--nnodes 1:2: a lost machine's survivor resumed with world size 1 and finished; a late machine was admitted")
