#!/usr/bin/env python3
"""The kill -9 trial (ctest capi_kill_trial_*): a worker saving checkpoints in a loop (ckpt_kill save) is
killed with SIGKILL at a random point, N times in the same folder, as a run that keeps crashing would be.
After each kill, ckpt_kill check loads the newest checkpoint, which must be whole and not older than the
last save the worker reported finished, saves once more, and finds no ".accel-tmp" folder left."""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--mode", choices=["auto", "fixed"], required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--async-save", action="store_true", help="the worker saves with {\"async\": true}")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"kill trial: mode {args.mode}{' (async saves)' if args.async_save else ''}, {args.trials} trials, "
          f"seed {seed}", flush=True)
    root = tempfile.mkdtemp(prefix="accel-kill-")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    last_step = 0
    midway = 0  # kills that left a temp folder (landed inside a save)
    try:
        for trial in range(args.trials):
            w = subprocess.Popen([args.worker, "save", root, args.mode] + (["async"] if args.async_save else []),
                                 stdout=subprocess.PIPE, env=env, text=True)
            # Time one save (between the first two reports), then kill at a random point of the next ones.
            lines = []
            t = []
            while len(lines) < 2:
                line = w.stdout.readline()
                if not line:
                    sys.exit(f"trial {trial}: the worker stopped before saving twice (status {w.wait()})")
                lines.append(line)
                t.append(time.monotonic())
            save_s = t[1] - t[0]
            time.sleep(rng.uniform(0.0, 3.0 * save_s))
            w.send_signal(signal.SIGKILL)
            rest = w.stdout.read()
            w.wait()
            reported = [int(x.split()[1]) for x in (lines + rest.splitlines()) if x.startswith("saved ")]
            parent = os.path.join(root, "checkpoints") if args.mode == "auto" else root
            left = [n for n in os.listdir(parent) if n.endswith(".accel-tmp")] if os.path.isdir(parent) else []
            midway += 1 if left else 0
            last_step = max([last_step] + reported)
            c = subprocess.run([args.worker, "check", root, args.mode, str(last_step)], env=env,
                               capture_output=True, text=True)
            sys.stdout.write(f"trial {trial}: killed after save {last_step} (a save takes {save_s:.3f} s)"
                             + (f", leaving {left[0]}" if left else "") + ": "
                             + (c.stdout.strip() or "") + "\n")
            if c.returncode != 0:
                sys.stderr.write(c.stderr)
                sys.exit(f"trial {trial}: check failed (status {c.returncode}); seed {seed}")
            last_step += 1  # the check saved one more step
        print(f"kill trial: {args.trials} kills ({midway} inside a save), the newest complete checkpoint loaded "
              "each time, no temp folder left")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
