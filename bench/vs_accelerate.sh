#!/usr/bin/env bash
# accel against the real Python Accelerate 0.24.1 (BENCHMARKS.md, "accel vs Python Accelerate"): the same
# training (bench/vs_accelerate.c through the C API, bench/vs_accelerate.py through Accelerate's Accelerator on
# Debian's python3-torch, which loads the same libtorch 1.13 .so files as libaccel), 1 process and 2 processes
# (Gloo: accel launch vs torchrun's variables set by hand), one thread per process on both sides, the two
# alternating in every round. Prints each run, then per case min / median / max steps/s and the ratio of the
# medians. The 1-process plain PyTorch loop (no Accelerate) runs in the same rounds, to tell Accelerate's cost
# from Python's. Usage: bench/vs_accelerate.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
steps=${3:-800}
warmup=10
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bench=$build/bench/bench_vs_accelerate
[ -x "$bench" ] || { echo "vs_accelerate.sh: no $bench (build the bench_vs_accelerate target)" >&2; exit 1; }
export OMP_NUM_THREADS=1 PYTHONPATH=$root/tests/peers/accelerate-0.24.1 PYTHONDONTWRITEBYTECODE=1
# The same OpenBLAS kernels on both sides (accel launch would set them only for its own processes).
. "$root/scripts/blas-env.sh" "$build"
py=/usr/bin/python3
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# Runs a command, echoes its result line and records "CASE SIDE steps/s" (the figure after "steps/s").
record() {
  local case=$1 side=$2; shift 2
  local line
  line=$("$@" | grep 'steps/s' | sed 's/^\[rank0\]: //')
  echo "  $case, $side: $line"
  echo "$case $side $(echo "$line" | sed -n 's/.*steps\/s \([0-9.]*\).*/\1/p')" >>"$results"
}

# Accelerate's 2 processes: torchrun's variables, set by hand (Debian's torch.distributed.run 1.13 fails on
# Python 3.11 before starting any worker); Accelerator(cpu=True) then picks MULTI_CPU with Gloo.
accelerate2() {
  local port
  port=$($py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for rank in 0 1; do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      $py "$here/vs_accelerate.py" "$steps" $warmup &
  done
  wait
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(getconf _NPROCESSORS_ONLN) cores, $steps steps after $warmup, 1 thread/process"
for r in $(seq 1 "$rounds"); do
  echo "== round $r"
  record "1-process" accel "$bench" "$steps" $warmup
  record "1-process" accelerate $py "$here/vs_accelerate.py" "$steps" $warmup
  record "1-process" pytorch $py "$here/vs_accelerate.py" "$steps" $warmup plain
  record "2-processes" accel "$build/bin/accel" launch -q -n 2 --main_process_port 0 \
    --num_cpu_threads_per_process 1 "$bench" "$steps" $warmup
  record "2-processes" accelerate accelerate2
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
$py - "$results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    case, side, value = line.split()
    runs.setdefault((case, side), []).append(float(value))
print("steps/s, min / median / max over %d rounds" % len(runs[("1-process", "accel")]))
print("| case | accel steps/s | Accelerate steps/s | ratio |")
print("| --- | ---: | ---: | ---: |")
for case in ("1-process", "2-processes"):
    a, p = runs[(case, "accel")], runs[(case, "accelerate")]
    fmt = lambda v: "%.1f (%.1f–%.1f)" % (statistics.median(v), min(v), max(v))
    print("| %s | %s | %s | %.2f |" % (case.replace("-", " "), fmt(a), fmt(p), statistics.median(a) / statistics.median(p)))
t = runs[("1-process", "pytorch")]
print("plain PyTorch loop, 1 process (no Accelerate): %.1f (%.1f–%.1f) steps/s" % (statistics.median(t), min(t), max(t)))
PY
