#!/usr/bin/env bash
# Distributed benchmarks (BENCHMARKS.md, "Distributed"): 1-process vs 2-process step time of the medium MLP
# (one thread per process) and DDP gradient-sync throughput vs raw allreduce, for Gloo (accel launch) and
# MPI (mpirun), interleaved over ROUNDS rounds. Usage: bench/dist_bench.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
steps=${3:-30}
bench=$build/bench/bench_dist_step
export OMP_NUM_THREADS=1
# The BLAS kernels accel launch picks, for every process here (mpirun's and the single ones inherit them).
. "$(dirname "$0")/../scripts/blas-env.sh" "$build"
for r in $(seq 1 "$rounds"); do
  echo "== round $r"
  "$bench" "$steps" 5
  # Two independent single processes at once: what sharing the 2 cores and the memory costs without any
  # communication (the ceiling for 2-process scaling on this machine).
  "$bench" "$steps" 5 | sed 's/^/[alone, concurrently] /' & "$bench" "$steps" 5 | sed 's/^/[alone, concurrently] /'
  wait
  "$build/bin/accel" launch -q -n 2 --main_process_port 0 --num_cpu_threads_per_process 1 "$bench" "$steps" 5
  mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$bench" "$steps" 5
done
