#!/usr/bin/env python3
"""Mismatched collectives (dist_mismatch.c): 2 processes started by hand (no launcher that would stop the others
when one fails), each one's exit status, output and time checked.

Usage: run_mismatch.py MODE --bin BUILD_DIR [--config JSON] [--timeout S] [--within S] [--env K=V ...]
  eval_barrier, eval_train: every rank must exit 3 (FAILED_PRECONDITION naming the rule, then ABORTED) within
      --within seconds of starting its collective, far below the --timeout given to init_process_group.
  eval_idle: rank 0 must time out (DEADLINE_EXCEEDED naming rank 1 as not in a collective), rank 1's next
      collective must be ABORTED repeating it; both exit 3.
  slow: a slow but matched collective is not reported: both exit 0."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from ports import free_port




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--config", default="")
    ap.add_argument("--timeout", type=int, default=60, help="init_process_group.timeout")
    ap.add_argument("--within", type=float, default=15.0, help="the most seconds a rank may wait in its collective")
    ap.add_argument("--env", action="append", default=[])
    a = ap.parse_args()
    prog = os.path.join(a.bin, "tests", "distributed", "dist_mismatch")
    sync = tempfile.mkdtemp(prefix="accel_mismatch_")
    port = free_port()
    procs = []
    t0 = time.time()
    for r in range(2):
        e = dict(os.environ)
        e.update(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        for kv in a.env:
            k, v = kv.split("=", 1)
            e[k] = v
        procs.append(subprocess.Popen([prog, a.mode, sync, str(a.timeout), a.config], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=e))
    outs = []
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(0.0, a.timeout + 120 - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit("rank %d hung" % r)
        outs.append(out)
        print("--- rank %d (exit %d after %.1f s)\n%s" % (r, p.returncode, time.time() - t0, out.rstrip()), flush=True)
    shutil.rmtree(sync, ignore_errors=True)
    want = 0 if a.mode == "slow" else 3
    for r, p in enumerate(procs):
        if p.returncode != want:
            sys.exit("rank %d exited %d, expected %d" % (r, p.returncode, want))
    if a.mode in ("eval_barrier", "eval_train"):
        for r, out in enumerate(outs):
            m = re.search(r"mismatched collective: \S+ after ([0-9.]+) s: (.*)", out)
            if not m or float(m.group(1)) > a.within:
                sys.exit("rank %d did not fail within %.0f s (timeout %d s)" % (r, a.within, a.timeout))
            if "rank %d is in" % r not in m.group(2) or "rank %d " % (1 - r) not in m.group(2):
                sys.exit("rank %d's message does not say where rank %d and rank %d are" % (r, r, 1 - r))
    if a.mode == "eval_idle":
        # issue 40.5: rank 0's timeout names the collective, the rank that did not arrive and how long it has been
        # out of collectives (all of rank 0's wait, the timeout, give or take a heartbeat)
        m = re.search(r"did not arrive in (\w+ #\d+)[^:]*: rank 1 is not in a collective \(its last was [^)]*\)+, for "
                      r"([0-9.]+) s", outs[0])
        if not m or float(m.group(2)) < a.timeout * 0.8:
            sys.exit("rank 0's timeout does not name the collective, rank 1 as not arrived, and its silence of about "
                     "%d s" % a.timeout)
        print("rank 0 named %s, rank 1 silent for %s s" % (m.group(1), m.group(2)))
    print("ok: %s" % a.mode)


if __name__ == "__main__":
    main()
