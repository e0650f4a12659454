#!/usr/bin/env bash
# The pipeline schedules' own bubble (bench/pp_bubble.cpp): each block's compute a fixed sleep, the transfers, the
# processes and the schedules real; per stage the measured bubble against (p-1)/(m+p-1) (GPipe, 1F1B) and
# (p-1)/(v m+p-1) (interleaved, v = 2 model chunks per stage). What pp_step.sh measures with real compute, minus
# this machine's contention for its cores between the compute and the transfers.
# Usage: [NPROC=2|4] bash bench/pp_bubble.sh [BUILD_DIR] [FORWARD_MS] [M ...]   (default M: 8 16)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
forward_ms=${2:-2}
shift $(( $# > 2 ? 2 : $# ))
ms=${*:-8 16}
nproc=${NPROC:-2}
blocks=$((4 * nproc)) # 2 chunks of 2 blocks per stage when interleaved
source scripts/blas-env.sh
for m in $ms; do
  for s in gpipe 1f1b interleaved_1f1b; do
    OMP_NUM_THREADS=1 "$build/bin/accel" launch -n "$nproc" --main_process_port 0 "$build/bench/bench_pp_bubble" \
      "$s" "$m" "$blocks" "$forward_ms" 2>&1 | grep "bubble median" | sed 's/^\[rank[0-9]*\]: //' | sort
  done
done
