#!/usr/bin/env python3
"""A stopped rank (SIGSTOP) must not hang the others (dist_stop.c; issue 42.1).

Usage: run_stop.py MODE --bin BUILD_DIR --victim R [--launch | --mpirun] [--config JSON] [--timeout S] [--within S]
  2 processes, started by hand, by `accel launch` or by mpirun (the mpi backend); once both printed "ready", rank R
  gets SIGSTOP.
  train: by hand, the other rank must exit 3 (its step failed with DEADLINE_EXCEEDED / UNAVAILABLE naming rank R,
      then it freed everything and returned from main); under accel launch, the launcher must end the job, its
      output naming rank R, and leave no process behind.
  idle: no rank is in a collective; accel launch's watchdog must end the job, naming rank R as stopped.
  oom: no SIGSTOP: rank R runs out of memory in a forward (an address-space limit); by hand, both ranks must exit 3:
      R with RESOURCE_EXHAUSTED, the other with a failure naming "rank R ran out of memory".
  oom_collective: the same with rank R out of memory inside a collective (a gather).
  Every process that does not end by itself must do so within --timeout + --within seconds of the SIGSTOP
  (default 10). The stopped process is always continued and killed at the end."""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

from ports import free_port




def alive(pid):
    """Whether pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Reader:
    """Collects a process's output lines (with the time each arrived) on a thread."""

    def __init__(self, proc, name):
        self.lines, self.proc, self.name = [], proc, name
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            print("%s| %s" % (self.name, line.rstrip("\n")), flush=True)

    def text(self):
        return "\n".join(self.lines)


def check_oom(a, procs, readers, limit):
    """Both ranks (by hand) exit 3 within the limit: the victim out of memory, the other naming it."""
    t0 = time.time()
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, limit + 30 - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            sys.exit("rank %d still running %.0f s after the ranks were ready: hung" % (r, time.time() - t0))
    elapsed = time.time() - t0
    for rd in readers:
        rd.t.join(timeout=5)
    print("run_stop: oom, rank %d out of memory: both exited %.1f s after ready (exit statuses %s)" %
          (a.victim, elapsed, [p.returncode for p in procs]), flush=True)
    if [p.returncode for p in procs] != [3, 3]:
        sys.exit("expected both ranks to exit 3 (failed as expected)")
    if elapsed > limit:
        sys.exit("took %.1f s, more than the timeout + %g s" % (elapsed, a.within))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["train", "idle", "oom", "oom_collective"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--victim", type=int, required=True)
    ap.add_argument("--launch", action="store_true")
    ap.add_argument("--mpirun", action="store_true", help="started by mpirun: the mpi backend")
    ap.add_argument("--config", default="")
    ap.add_argument("--expect-silence", action="store_true",
                    help="the survivor's message names its collective and how long the victim's heartbeat was silent")
    ap.add_argument("--timeout", type=int, default=6, help="init_process_group.timeout")
    ap.add_argument("--within", type=float, default=10.0, help="seconds allowed past the timeout")
    a = ap.parse_args()
    prog = os.path.join(a.bin, "tests", "distributed", "dist_stop")
    base = dict(os.environ, OMP_NUM_THREADS="1", ACCEL_TEST_VICTIM=str(a.victim))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        base.pop(k, None)
    cmd = [prog, a.mode, str(a.timeout), a.config]
    procs, readers = [], []
    if a.mpirun:  # mpirun ends the job once the survivor exits; its output is the ranks'
        procs.append(subprocess.Popen(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
                                       "OMP_NUM_THREADS=1"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=base))
        readers.append(Reader(procs[0], "mpirun"))
    elif a.launch:
        procs.append(subprocess.Popen([os.path.join(a.bin, "bin", "accel"), "launch", "-n", "2", "--main_process_port",
                                       "0"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=base))
        readers.append(Reader(procs[0], "launch"))
    else:
        port = free_port()
        for r in range(2):
            e = dict(base, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2",
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e))
            readers.append(Reader(procs[r], "rank%d" % r))
    victim_pid = None
    try:
        pids = {}
        t0 = time.time()
        while len(pids) < 2:
            if time.time() - t0 > 90:
                sys.exit("the ranks never became ready")
            if any(p.poll() is not None for p in procs):
                sys.exit("a process ended before both ranks were ready")
            for rd in readers:
                for line in rd.lines:
                    if ": ready (pid " in line:
                        r = int(line.split("rank", 1)[1].split(":")[0].strip().rstrip("]"))
                        pids[r] = int(line.rsplit("pid ", 1)[1].rstrip(")"))
            time.sleep(0.05)
        victim_pid = pids[a.victim]
        limit = a.timeout + a.within
        if a.mode.startswith("oom"):
            return check_oom(a, procs, readers, limit)
        time.sleep(0.3)
        os.kill(victim_pid, signal.SIGSTOP)
        stopped_at = time.time()
        print("run_stop: SIGSTOP to rank %d (pid %d)" % (a.victim, victim_pid), flush=True)
        waited = procs if a.launch or a.mpirun else [p for r, p in enumerate(procs) if r != a.victim]
        for p in waited:
            try:
                p.wait(timeout=max(0.1, limit + 30 - (time.time() - stopped_at)))
            except subprocess.TimeoutExpired:
                sys.exit("still running %.0f s after the SIGSTOP (timeout %d s): hung" % (time.time() - stopped_at,
                                                                                      a.timeout))
        elapsed = time.time() - stopped_at
        for rd in readers:
            rd.t.join(timeout=5)
        text = "\n".join(rd.text() for rd in readers)
        print("run_stop: %s, %s, victim rank %d, timeout %d s: every other process exited %.1f s after the SIGSTOP "
              "(exit statuses %s)" % (a.mode, "accel launch" if a.launch else "mpirun" if a.mpirun else "by hand",
                                      a.victim, a.timeout, elapsed,
                                      [p.returncode for p in waited]), flush=True)
        if elapsed > limit:
            sys.exit("took %.1f s, more than the timeout + %g s" % (elapsed, a.within))
        if ("rank %d" % a.victim) not in text:
            sys.exit("no message names rank %d" % a.victim)
        if a.launch:
            if procs[0].returncode == 0:
                sys.exit("accel launch exited 0 with a stopped rank")
            time.sleep(0.2)
            if alive(victim_pid):
                sys.exit("accel launch left the stopped rank %d (pid %d) behind" % (a.victim, victim_pid))
            if a.mode == "idle" and "stopped" not in text:
                sys.exit("accel launch did not say that rank %d stopped" % a.victim)
        elif a.mpirun:  # mpirun's status is the first failing rank's (the survivor's 3, or its kill of the rest)
            if procs[0].returncode == 0:
                sys.exit("mpirun exited 0 with a stopped rank")
        elif waited[0].returncode != 3:
            sys.exit("rank %d exited %d, expected 3 (failed as expected)" % (1 - a.victim, waited[0].returncode))
        if a.expect_silence:  # issue 40.5: the collective, the silent rank, how long (about the wait, >= 1.6 s)
            m = re.search(r"(?:gloo|mpi) (\w+ #\d+)[^\n]* (?:failed|did not complete within [0-9.]+ s) on rank[^\n]*"
                          r"rank %d stopped responding \(no heartbeat for ([0-9.]+) s" % a.victim, text)
            if not m or not 1.6 <= float(m.group(2)) <= elapsed + 2:
                sys.exit("the survivor's message does not name its collective and rank %d's silence (<= %.1f s)" %
                         (a.victim, elapsed))
            print("run_stop: named %s and rank %d silent for %s s" % (m.group(1), a.victim, m.group(2)), flush=True)
    finally:
        if victim_pid is not None and alive(victim_pid):
            os.kill(victim_pid, signal.SIGKILL)
            os.kill(victim_pid, signal.SIGCONT)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
