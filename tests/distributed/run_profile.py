#!/usr/bin/env python3
"""accelerator.profile() on 1 or N processes: runs dist_profile (by itself, or under `accel launch -n N`, Gloo)
and checks the traces: one profile_{rank}.json per process and nothing else, each parsing as JSON, holding
ATen operators and accel's named ranges, and with a schedule only the active steps.
Usage: run_profile.py --bin BUILD_DIR --np N [--schedule]"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

# kwargs_handlers.profile.schedule_option of --schedule over STEPS optimizer steps: step 0 skipped, 1 waits,
# 2 is warmup (profiled, dropped), 3 and 4 recorded; one cycle only, so 5..7 are not profiled.
SCHEDULE = {"skip_first": 1, "wait": 1, "warmup": 1, "active": 2, "repeat": 1}
STEPS_SCHEDULED = 8
STEPS_WHOLE = 3
PHASES = ["accel::data_wait", "accel::forward", "accel::backward", "accel::optimizer_step"]
DDP_PHASES = ["accel::bucket_all_reduce", "accel::gradient_sync"]


def fail(msg):
    sys.exit("run_profile: " + msg)


def run(cmd, env):
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150, env=env)
    print(p.stdout.rstrip(), flush=True)
    if p.returncode != 0:
        fail("exit status %d" % p.returncode)
    return p.stdout


def check_trace(path, rank, np, scheduled):
    with open(path) as f:
        trace = json.load(f)  # must parse as JSON: chrome://tracing and Perfetto read it so
    events = trace["traceEvents"]
    names = collections.Counter(e["name"] for e in events if e.get("ph") == "X")
    meta = [e for e in events if e.get("ph") == "M" and e["name"] == "process_name"]
    if not meta or meta[0]["args"]["name"] != "accel rank %d" % rank:
        fail("%s: no process_name naming rank %d" % (path, rank))
    for e in events:
        if e.get("ph") == "X" and (not isinstance(e["ts"], int) or not isinstance(e["dur"], int) or e["dur"] < 0):
            fail("%s: a complete event without integer ts/dur: %r" % (path, e))
    aten = [n for n in names if n.startswith("aten::")]
    if "aten::addmm" not in names or "aten::mse_loss" not in names:
        fail("%s: ATen operators missing (has %s)" % (path, sorted(aten)[:20]))
    phases = PHASES + (DDP_PHASES if np > 1 else [])
    missing = [p for p in phases if p not in names]
    if missing:
        fail("%s: accel's ranges missing: %s (has %s)" % (path, missing, sorted(n for n in names if "::" in n and not n.startswith("aten"))))
    if np > 1:
        # Each bucket's all-reduce is its time in flight (reported from the steady clock): inside a backward.
        backward = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "accel::backward"]
        for e in events:
            if e["name"] == "accel::bucket_all_reduce" and not any(
                    b0 - 50 <= e["ts"] and e["ts"] + e["dur"] <= b1 + 50 for b0, b1 in backward):
                fail("%s: a bucket all-reduce outside every backward: %r" % (path, e))
    steps = sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))
    if scheduled:
        # Only the schedule's active steps: 3 and 4, each with one forward, one backward, one optimizer step.
        if steps != [3, 4]:
            fail("%s: recorded steps %s, expected the active steps [3, 4]" % (path, steps))
        for p in PHASES:
            if names[p] != 2:
                fail("%s: %s recorded %d times, expected 2 (the active steps only)" % (path, p, names[p]))
        if "accel::save_state" in names:
            fail("%s: save_state after the schedule's last active step was recorded" % path)
    else:
        if steps != list(range(STEPS_WHOLE + 1)):
            fail("%s: ProfilerStep ranges %s, expected 0..%d" % (path, steps, STEPS_WHOLE))
        if names["accel::optimizer_step"] != STEPS_WHOLE or names["accel::save_state"] != 1:
            fail("%s: %d optimizer steps, %d save_state ranges recorded" % (path, names["accel::optimizer_step"], names["accel::save_state"]))
        # record_shapes, with_flops and profile_memory: shapes on operators, flops on the matrix products, memory events.
        addmm = [e for e in events if e["name"] == "aten::addmm"]
        if not all("Input Dims" in e["args"] and e["args"].get("Flops", 0) > 0 for e in addmm):
            fail("%s: aten::addmm without Input Dims or Flops: %r" % (path, addmm[0]))
        if not any(e["name"] == "[memory]" and e.get("ph") == "i" and e["args"]["Bytes"] != 0 for e in events):
            fail("%s: no [memory] events with profile_memory" % path)
    print("%s: %d events, %d ATen operator kinds, steps %s" % (path, len(events), len(aten), steps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--schedule", action="store_true")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    with tempfile.TemporaryDirectory() as tmp:
        traces = os.path.join(tmp, "traces")
        profile = {"output_trace_dir": traces}
        if a.schedule:
            profile["schedule_option"] = SCHEDULE
        else:
            profile.update(record_shapes=True, with_flops=True, profile_memory=True)
        config = json.dumps({"kwargs_handlers": {"profile": profile}})
        steps = STEPS_SCHEDULED if a.schedule else STEPS_WHOLE
        prog = [os.path.join(a.bin, "tests", "distributed", "dist_profile"), config, str(steps), os.path.join(tmp, "ckpt")]
        if a.np > 1:
            prog = [os.path.join(a.bin, "bin", "accel"), "launch", "-n", str(a.np), "--main_process_port", "0"] + prog
        out = run(prog, env)
        if out.count("profile: ok") != a.np:
            fail("expected %d processes to report" % a.np)
        want = sorted("profile_%d.json" % r for r in range(a.np))
        if sorted(os.listdir(traces)) != want:
            fail("trace files %s, expected %s" % (sorted(os.listdir(traces)), want))
        for r in range(a.np):
            check_trace(os.path.join(traces, "profile_%d.json" % r), r, a.np, a.schedule)
    print("profile traces: ok")


if __name__ == "__main__":
    main()
