#!/usr/bin/env bash
# LOMO / AdaLomo vs AdamW (the baseline, run first each round): peak RSS and seconds per step of a ~29.5 M-parameter
# GPT, one process per optimizer type, ROUNDS interleaved rounds; prints each run and the medians' ratios to AdamW.
# Usage: bash bench/lomo_memory.sh [BUILD_DIR] [STEPS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-3}
rounds=${3:-2}
source scripts/blas-env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for t in adamw lomo adalomo; do "$build/bench/bench_lomo_memory" "$t" "$steps" | tee -a "$results"; done
  "$build/bench/bench_lomo_memory" lomo "$steps" ', "clip_grad_norm": 1.0' | sed 's/^lomo/lomo+clip_grad_norm/' | tee -a "$results"
done
python3 - "$results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    t, sec, rss = line.split()
    runs.setdefault(t, []).append((float(sec), int(rss)))
base_s = statistics.median(s for s, _ in runs["adamw"])
base_r = statistics.median(r for _, r in runs["adamw"])
print(f"{'optimizer':<22}{'s/step':>8}{'x adamw':>9}{'peak RSS MiB':>14}{'x adamw':>9}")
for t, v in runs.items():
    s = statistics.median(x for x, _ in v)
    r = statistics.median(y for _, y in v)
    print(f"{t:<22}{s:8.3f}{s / base_s:9.2f}{r / 2**20:14.1f}{r / base_r:9.3f}")
PY
