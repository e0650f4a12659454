#!/usr/bin/env bash
# Context parallelism vs one process (the baseline, same run): peak activation memory of a GPT training step at
# T tokens (default 2048) and the whole batch's tokens/s, for cp 2 with each cp_comm_strategy ("allgather",
# "alltoall" = ring attention) and for Ulysses sp 2 (sp_size: all-to-all to head shards). Also checks that every step's loss, and the loss after save_state / load_state,
# equal one process's (within 1e-4: float32 sums in another order). One process gets OMP_NUM_THREADS=2, each
# cp rank 1 (the same cores).
# Usage: bash bench/cp_step.sh [BUILD_DIR] [T] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
T=${2:-2048}
steps=${3:-4}
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=2 "$build/bench/bench_cp_step" "$T" "$steps" "$work/one" > "$work/one.txt"
for s in allgather alltoall; do
  OMP_NUM_THREADS=1 "$build/bin/accel" launch -n 2 --main_process_port 0 --parallelism_config_cp_size 2 \
    --parallelism_config_cp_comm_strategy "$s" "$build/bench/bench_cp_step" "$T" "$steps" "$work/$s" > "$work/$s.txt"
done
OMP_NUM_THREADS=1 "$build/bin/accel" launch -n 2 --main_process_port 0 --parallelism_config_sp_size 2 \
  "$build/bench/bench_cp_step" "$T" "$steps" "$work/ulysses" > "$work/ulysses.txt"
python3 - "$work" "$T" <<'PY'
import re, sys
work, T = sys.argv[1], sys.argv[2]
def read(name):
    losses, stats = {}, []
    for line in open(f"{work}/{name}.txt"):
        line = re.sub(r"^\[rank\d+\]: ", "", line.strip())
        m = re.match(r"rank (\d+) (step (\d+)|resumed) loss (\S+)", line)
        if m:
            losses.setdefault(m.group(2), []).append(float(m.group(4)))
        m = re.match(r"rank (\d+) world (\d+) activation_bytes (\d+) peak_before_bytes (\d+) tokens_per_s (\S+)", line)
        if m:
            stats.append((int(m.group(3)), float(m.group(5))))
    return losses, stats
one, one_stats = read("one")
base_act, base_tps = one_stats[0]
print(f"T = {T}: one process: activation {base_act / 2**20:.1f} MiB, {base_tps:.0f} tokens/s")
bad = 0
for s in ("allgather", "alltoall", "ulysses"):
    losses, stats = read(s)
    act = max(a for a, _ in stats)
    tps = min(t for _, t in stats)
    for k, v in one.items():
        for got in losses.get(k, []):
            if abs(got - v[0]) > 1e-4:
                print(f"  {s}: {k} loss {got} differs from one process's {v[0]}")
                bad += 1
        if len(losses.get(k, [])) != 2:
            print(f"  {s}: {k}: {len(losses.get(k, []))} ranks reported"); bad += 1
    print(f"{'sp' if s == 'ulysses' else 'cp'} 2 {s:<9}: activation per rank {act / 2**20:.1f} MiB = {act / base_act:.3f} x one process; "
          f"{tps:.0f} tokens/s = {tps / base_tps:.2f} x; losses (all {len(one)} steps, resumed) equal one process's")
sys.exit(1 if bad else 0)
PY
