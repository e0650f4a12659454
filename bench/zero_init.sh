#!/usr/bin/env bash
# zero3_init_flag against no flag, 2 processes each, in one run: every process's peak resident memory while
# building the model, through prepare and through one step (bench/zero_init.c), and the ratios (flag / no flag)
# of the increases over the memory before building. Usage: bash bench/zero_init.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
for flag in off on; do
    OMP_NUM_THREADS=1 "$build/bin/accel" launch -n 2 "$build/bench/bench_zero_init" "$flag" 2>&1 | grep zero3_init_flag | sort
done | tee /tmp/accel-zero-init.$$ 
python3 - /tmp/accel-zero-init.$$ <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.search(r"flag (\w+) +rank (\d+): .*\(\+([\d.]+)\); .*\(\+([\d.]+)\); .*\(\+([\d.]+)\)", line)
    if m:
        rows.setdefault(m.group(1), []).append([float(m.group(k)) for k in (3, 4, 5)])
for i, (off, on) in enumerate(zip(rows["off"], rows["on"])):
    print("rank %d: " % i + ", ".join("%s x%.2f (%.1f vs %.1f MB)" % (what, b / a, b, a) for what, a, b in
                                      zip(("building", "through prepare", "through a step"), off, on)))
PY
rm -f /tmp/accel-zero-init.$$
