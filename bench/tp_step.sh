#!/usr/bin/env bash
# Tensor parallelism vs one process (the baseline, same run), on a small llama: seconds per step, each rank's
# parameter + AdamW-state bytes and peak RSS at tp 1 (one process, OMP_NUM_THREADS=2) and tp 2 (two processes
# over Gloo, one thread each: the same cores), and their ratios. Also checks that every step's loss at tp 2 equals
# one process's (within 1e-4: float32 sums in another order).
# Usage: bash bench/tp_step.sh [BUILD_DIR] [T] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
T=${2:-256}
steps=${3:-6}
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=2 "$build/bench/bench_tp_step" "$T" "$steps" > "$work/one.txt"
OMP_NUM_THREADS=1 "$build/bin/accel" launch -n 2 --main_process_port 0 --parallelism_config_tp_size 2 \
  "$build/bench/bench_tp_step" "$T" "$steps" > "$work/tp2.txt"
python3 - "$work" "$T" <<'PY'
import json, re, sys
work, T = sys.argv[1], sys.argv[2]
def read(name):
    losses, ranks = {}, []
    for line in open(f"{work}/{name}.txt"):
        line = re.sub(r"^\[rank\d+\]: ", "", line.strip())
        m = re.match(r"rank (\d+) step (\d+) loss (\S+)", line)
        if m:
            losses.setdefault(int(m.group(2)), []).append(float(m.group(3)))
        m = re.match(r"rank (\d+) seconds_per_step (\S+) peak_rss_mib (\S+) memory (.*)", line)
        if m:
            mod = json.loads(m.group(4))["models"][0]
            ranks.append((float(m.group(2)), float(m.group(3)), mod["parameter_bytes"] + mod["optimizer_state_bytes"]))
    return losses, ranks
one, base_ranks = read("one")
base = base_ranks[0]
tp, ranks = read("tp2")
bad = 0
for k, v in one.items():
    got = tp.get(k, [])
    if len(got) != 2 or any(abs(g - v[0]) > 1e-4 for g in got):
        print(f"step {k}: tp 2 losses {got}, one process {v[0]}"); bad += 1
sec, rss, state = max(r[0] for r in ranks), max(r[1] for r in ranks), max(r[2] for r in ranks)
print(f"llama T = {T}, batch 4: one process {base[0]:.3f} s/step, parameters + AdamW state {base[2] / 2**20:.1f} MiB, "
      f"peak RSS {base[1]:.0f} MiB")
print(f"tp 2 (2 processes, Gloo): {sec:.3f} s/step = {sec / base[0]:.2f} x; parameters + AdamW state per rank "
      f"{state / 2**20:.1f} MiB = {state / base[2]:.3f} x; peak RSS per rank {rss:.0f} MiB = {rss / base[1]:.2f} x; "
      f"losses of all {len(one)} steps {'equal one process' if not bad else 'DIFFER'}")
sys.exit(1 if bad else 0)
PY
