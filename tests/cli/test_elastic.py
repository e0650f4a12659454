#!/usr/bin/env python3
"""Elastic restarts of `accel launch` (--max_restarts, torchrun's semantics) with automatic resume: a 2-process
job (tests/distributed/dist_train with ACCEL_TEST_ELASTIC=1: automatic checkpoint naming, a save after every
step, load_latest_state at the start) whose worker kills itself with SIGKILL at a random step - before or after
that step's save - is restarted whole and ends with the final weights of a run never interrupted, bit for bit;
its checkpoints also resume on 1 process (another world size).
Each round gets TORCHELASTIC_RESTART_COUNT / _MAX_RESTARTS / _RUN_ID and a rendezvous port of its own. With
--max_restarts 0 the job fails as before (128 + 9). Prints the restart time (the kill to the first step after
the resume). Usage: test_elastic.py BUILD_DIR [--trials N] [--seed S]"""
import argparse
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

STEPS = 10          # optimizer steps of 8 samples (2 processes x 4): 12 per pass, so kills land mid-pass
WEIGHT_BYTES = 4 * (8 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4)  # dist_train's default MLP 8,32,32,4 as float32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    accel = os.path.join(a.build, "bin", "accel")
    prog = os.path.join(a.build, "tests", "distributed", "dist_train")
    seed = a.seed if a.seed is not None else int(time.time())
    rng = random.Random(seed)
    print("seed %d (rerun with --seed %d)" % (seed, seed), flush=True)
    tmp = tempfile.mkdtemp(prefix="accel_elastic_")
    failures = []
    env = dict(os.environ, OMP_NUM_THREADS="1", ACCEL_TEST_ELASTIC="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_CONFIG_FILE"):
        env.pop(k, None)

    def job(name, flags, extra_env, project=None, n=2, steps=STEPS):
        project = os.path.join(tmp, project or name)
        out = os.path.join(tmp, name + ".bin")
        config = ('{"project_config": {"project_dir": "%s", "automatic_checkpoint_naming": true, "total_limit": 2}}'
                  % project)
        cmd = [accel, "launch", "-n", str(n), "--main_process_port", "0", *flags, prog, out, str(8 // n), str(steps),
               config]
        t0 = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           env=dict(env, **extra_env), timeout=120)
        text = "\n".join(l for l in p.stdout.splitlines() if "memory stats" not in l and "ddp stats" not in l)
        print("$ %s\n%s\n(exit %d after %.1f s)" % (" ".join(cmd[:9]), text, p.returncode, time.time() - t0), flush=True)
        return p.returncode, p.stdout, out

    def weights(path):
        with open(path, "rb") as f:
            return f.read()[:WEIGHT_BYTES]

    code, _, ref_out = job("uninterrupted", ["--max_restarts", "2"], {})
    if code != 0:
        sys.exit("the uninterrupted run failed")
    ref = weights(ref_out)

    restart_times = []
    for t in range(a.trials):
        step, rank, after = rng.randint(1, STEPS - 1), rng.randint(0, 1), rng.randint(0, 1)
        what = "trial %d: rank %d killed at step %d %s its save" % (t, rank, step, "after" if after else "before")
        print(what, flush=True)
        code, text, out = job("trial%d" % t, ["--max_restarts", "2", "--monitor_interval", "0.1", "--rdzv_id", "job%d" % t],
                              {"ACCEL_TEST_DIE_AT": str(step), "ACCEL_TEST_DIE_RANK": str(rank),
                               "ACCEL_TEST_DIE_AFTER_SAVE": str(after)})
        if code != 0:
            failures.append("%s: the job failed (exit %d) instead of restarting" % (what, code))
            continue
        ports = re.findall(r"rendezvous 127\.0\.0\.1:(\d+)", text)
        resumed = re.findall(r"elastic: round 1 of max 2, run id job%d: (?:resumed|fresh start) at step (\d+)" % t, text)
        killed = re.search(r"killing itself at step \d+ \w+ its save at ([0-9.]+)", text)
        first = re.findall(r"first step after resume \(step \d+\) done at ([0-9.]+)", text)
        expect_resume = step if after else step - 1  # the newest complete checkpoint (none: a fresh start)
        if "restart 1 of 2" not in text or len(ports) != 2 or ports[0] == ports[1]:
            failures.append("%s: no second round at a fresh rendezvous port (ports %s)" % (what, ports))
        if resumed != [str(expect_resume)] * 2:
            failures.append("%s: resumed at %s, expected step %d on both ranks" % (what, resumed, expect_resume))
        if weights(out) != ref:
            failures.append("%s: final weights differ from the uninterrupted run" % what)
        if killed and first:
            restart_times.append(max(float(x) for x in first) - float(killed.group(1)))

    # Another world size: the uninterrupted run's checkpoints (2 processes) resumed by 1 process with the same global
    # batch and trained 2 steps further equal 2 processes trained that far (DDP's average: within 1e-6).
    code, text, one_out = job("one_process", [], {}, project="uninterrupted", n=1, steps=STEPS + 2)
    code2, _, two_out = job("two_processes", [], {}, steps=STEPS + 2)
    if code != 0 or code2 != 0 or "resumed at step %d" % STEPS not in text:
        failures.append("resumed on 1 process: exit %d (reference %d), expected a resume at step %d" % (code, code2, STEPS))
    else:
        w1, w2 = (struct.unpack("%df" % (WEIGHT_BYTES // 4), weights(f)) for f in (one_out, two_out))
        diff = max(abs(x - y) for x, y in zip(w1, w2))
        print("resumed on 1 process from a 2-process checkpoint: max weight difference %.3g" % diff)
        if not diff <= 1e-6:
            failures.append("resumed on 1 process: weights differ from 2 processes by %g" % diff)

    # No restarts allowed: the job fails as it always did, with the killed worker's status.
    code, text, _ = job("no_restarts", ["--max_restarts", "0"], {"ACCEL_TEST_DIE_AT": "3", "ACCEL_TEST_DIE_RANK": "1"})
    if code != 128 + 9 or "failed: rank 1 was killed by signal 9" not in text or "restart 1" in text:
        failures.append("--max_restarts 0: exit %d, expected 137 and the failure named, no restart" % code)
    # Restarts exhausted: a worker that dies in every round fails the job after N restarts.
    code, text, _ = job("exhausted", ["--max_restarts", "1"], {"ACCEL_TEST_DIE_AT": "2", "ACCEL_TEST_DIE_RANK": "0",
                                                              "ACCEL_TEST_DIE_EVERY_ROUND": "1"})
    if code != 128 + 9 or "after 1 restart, --max_restarts 1" not in text:
        failures.append("--max_restarts 1 with a worker dying every round: exit %d, expected 137 after 1 restart" % code)

    # Flag values are checked before anything starts.
    for bad in (["--max_restarts", "-1"], ["--max_restarts", "x"], ["--monitor_interval", "0"],
                ["--monitor_interval", "nan"], ["--rdzv_id="]):
        p = subprocess.run([accel, "launch", *bad, "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, env=env, timeout=30)
        if p.returncode != 2 or bad[0].split("=")[0] not in p.stderr:
            failures.append("accel launch %s: exit %d, expected 2 naming the flag: %s" % (" ".join(bad), p.returncode,
                                                                                        p.stderr.strip()[:200]))

    if restart_times:
        print("restart time (SIGKILL to the first step after the resume, 2 processes, incl. process start, "
              "rendezvous and load_latest_state): min %.2f s, max %.2f s over %d restarts"
              % (min(restart_times), max(restart_times), len(restart_times)))
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        print("files kept in %s" % tmp)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("elastic restarts: %d trials, final weights equal the uninterrupted run bit for bit" % a.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
