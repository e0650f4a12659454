#!/usr/bin/env python3
"""The C example as a user runs it, under `accel launch -n 2`:

- with its output in a pipe (a log file, CI): plain lines, no progress bar ('\\r');
- on a terminal (a pseudo-terminal here): rank 0 draws a progress bar with samples/s and loss, each redraw
  prefixed with "[rank0]: ", and the epoch lines stay whole;
- with {"log_with": "tensorboard"}: one event file, written by rank 0 only, that holds the run config and
  the loss and learning rate of every step (read back with the same .proto, every CRC checked).
"""
import argparse
import glob
import json
import math
import os
import pty
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_tensorboard as tb  # noqa: E402  (records(): framing and CRCs; load_proto())


def expect(cond, what):
    if not cond:
        sys.exit("check_example_logging: " + what)


def run_on_terminal(cmd):
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            d = os.read(master, 65536)
        except OSError:  # EIO once every writer is gone
            break
        if not d:
            break
        out += d
    os.close(master)
    return p.wait(timeout=150), out.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--accel", required=True)
    ap.add_argument("--example", required=True)
    ap.add_argument("--proto", required=True)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="accel_example_")
    launch = [a.accel, "launch", "-n", "2", "--main_process_port", "0", a.example]

    config = json.dumps({"log_with": "tensorboard", "project_config": {"logging_dir": os.path.join(work, "runs")}})
    p = subprocess.run(launch + [config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=150)
    expect(p.returncode == 0, "the example failed:\n" + p.stdout)
    expect("\r" not in p.stdout and "samples/s" not in p.stdout, "a progress bar in piped output:\n" + p.stdout)
    expect(p.stdout.count("[rank0]: epoch ") == 8 and "[rank1]: epoch" not in p.stdout, "8 epoch lines, rank 0 only")

    pb = tb.load_proto(a.proto, work)
    events = glob.glob(os.path.join(work, "runs", "train_mlp", "events.out.tfevents.*"))
    expect(len(events) == 1, "expected one event file, found %s" % events)
    evs = []
    for r in tb.records(events[0]):
        e = pb.Event()
        e.ParseFromString(r)
        evs.append(e)
    cfg = evs[1].summary.value[0]
    expect(json.loads(cfg.tensor.string_val[0].decode()) == {"lr": 0.003, "batch_size": 64, "epochs": 8},
           "run config")
    scalars = {}
    for e in evs[2:]:
        for v in e.summary.value:
            scalars[(v.tag, e.step)] = v.simple_value
    steps = 8 * 2048 // (64 * 2)  # 8 epochs of this rank's 16 batches
    expect(sorted(k[1] for k in scalars if k[0] == "loss") == list(range(steps)), "a loss for every step")
    expect(all(math.isfinite(scalars[("loss", s)]) and scalars[("loss", s)] > 0 for s in range(steps)), "losses")
    expect(scalars[("loss", steps - 1)] < scalars[("loss", 0)] / 4, "the logged loss falls")
    expect(abs(scalars[("lr", steps - 1)]) < 1e-6 and max(scalars[("lr", s)] for s in range(steps)) > 0.0029,
           "the cosine schedule's learning rates")

    rc, out = run_on_terminal(launch)
    expect(rc == 0, "the example failed on a terminal:\n" + out)
    expect("\r[rank0]: epoch 1/8 [" in out and "samples/s" in out, "no progress bar on a terminal:\n" + out[:2000])
    expect("[rank1]: epoch" not in out, "rank 1 drew a bar")
    expect("[rank0]: final loss" in out, "final line")
    print("check_example_logging: %d events, %d steps logged; progress bar on a terminal (%d redraws), none in a pipe"
          % (len(evs), steps, out.count("\r[rank0]: epoch")))


if __name__ == "__main__":
    main()
