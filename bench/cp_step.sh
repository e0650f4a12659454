#!/usr/bin/env bash
# Context parallelism vs one process (the baseline, same run): peak activation memory of a GPT training step at
# T tokens (default 2048) and the whole batch's tokens/s, for cp 2 with each cp_comm_strategy ("allgather",
# "alltoall" = ring attention) and for Ulysses sp 2 (sp_size: all-to-all to head shards). Also checks that every step's loss, and the loss after save_state / load_state,
# equal one process's (within 1e-4: float32 sums in another order). One process gets OMP_NUM_THREADS=2, each
# cp rank 1 (the same cores); ONE_THREADS=1 gives one process a single thread instead (on a machine that other
# jobs load, two threads' barriers can stall one process several times over: compare per core there).
# B (default 1): the global batch, in sequences. When B splits over the processes, DDP over the same processes
# trains the same batch in the same run (each rank B / NPROC sequences; its losses, averaged over the ranks, must
# equal one process's) and every run is also compared with it; each run's per-rank peak resident set is printed.
# NPROC=4 (default 2): cp 4 and sp 4 instead, plus cp 2 x dp 2 (B even) and DDP 4 (B a multiple of 4); 4 processes
# of one thread each on a 2-core machine oversubscribe it. MODEL=llama (default gpt): a Llama of the same shape
# (hidden 256, 4 layers, 8 heads; bench/lm_spec.h).
# LAUNCHER=mpirun (default launch: accel launch, Gloo): the processes started by mpirun (the mpi backend).
# Usage: [MODEL=gpt|llama] [NPROC=2|4] [ONE_THREADS=2|1] [LAUNCHER=launch|mpirun] bash bench/cp_step.sh [BUILD_DIR] [T] [STEPS] [B]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
T=${2:-2048}
steps=${3:-4}
B=${4:-1}
nproc=${NPROC:-2}
export BENCH_MODEL=${MODEL:-gpt}
case "$nproc" in 2|4) ;; *) echo "NPROC must be 2 or 4, got $nproc" >&2; exit 2 ;; esac
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launch() { # launch NAME FLAGS...: the bench under accel launch -n NPROC (LAUNCHER=mpirun: mpirun), one thread per rank
  local name=$1; shift
  local starter=("$build/bin/accel" launch -n "$nproc" --main_process_port 0 "$@")
  if [ "${LAUNCHER:-launch}" = mpirun ]; then # accel launch's --parallelism_config_* flags as the variables it sets
    starter=(mpirun --allow-run-as-root --oversubscribe -np "$nproc" -x OMP_NUM_THREADS=1 -x BENCH_MODEL)
    [ $# -gt 0 ] && starter+=(-x ACCELERATE_USE_PARALLELISM_CONFIG=true)
    while [ $# -gt 1 ]; do
      local key=${1#--}
      starter+=(-x "${key^^}=$2")
      shift 2
    done
  fi
  OMP_NUM_THREADS=1 "${starter[@]}" "$build/bench/bench_cp_step" "$T" "$steps" "$work/$name" "$B" > "$work/$name.txt"
}
runs="one"
OMP_NUM_THREADS=${ONE_THREADS:-2} "$build/bench/bench_cp_step" "$T" "$steps" "$work/one" "$B" > "$work/one.txt"
for s in allgather alltoall; do
  launch "$s" --parallelism_config_cp_size "$nproc" --parallelism_config_cp_comm_strategy "$s"
  runs="$runs $s"
done
launch ulysses --parallelism_config_sp_size "$nproc"
runs="$runs ulysses"
if [ "$nproc" = 4 ] && [ $((B % 2)) = 0 ]; then
  launch cp2dp2 --parallelism_config_cp_size 2 --parallelism_config_dp_replicate_size 2 \
    --parallelism_config_cp_comm_strategy alltoall
  runs="$runs cp2dp2"
fi
if [ $((B % nproc)) = 0 ]; then
  launch ddp
  runs="$runs ddp"
fi
python3 - "$work" "$T" "$B" "$nproc" "$BENCH_MODEL" "${ONE_THREADS:-2}" $runs <<'PY'
import re, sys
work, T, B, nproc, model, threads, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7:]
def read(name):
    losses, stats = {}, []
    for line in open(f"{work}/{name}.txt"):
        line = re.sub(r"^\[rank\d+\]: ", "", line.strip())
        m = re.match(r"rank (\d+) (step (\d+)|resumed) loss (\S+)", line)
        if m:
            losses.setdefault(m.group(2), []).append(float(m.group(4)))
        m = re.match(r"rank (\d+) world (\d+) activation_bytes (\d+) peak_before_bytes (\d+) tokens_per_s (\S+) peak_bytes (\d+)", line)
        if m:
            stats.append((int(m.group(3)), float(m.group(5)), int(m.group(6))))
    return losses, stats
one, one_stats = read("one")
base_act, base_tps, base_peak = one_stats[0]
label = {"allgather": f"cp {nproc} allgather", "alltoall": f"cp {nproc} alltoall", "ulysses": f"sp {nproc} ulysses",
         "cp2dp2": "cp 2 x dp 2 alltoall", "ddp": f"DDP {nproc}"}
with_dp = {"cp2dp2", "ddp"} # their ranks train different sequences: the mean of their losses is one process's
result, bad = {}, 0
for s in runs[1:]:
    losses, stats = read(s)
    for k, v in one.items():
        got = losses.get(k, [])
        if len(got) != nproc:
            print(f"  {s}: {k}: {len(got)} ranks reported"); bad += 1
        for g in ([sum(got) / len(got)] if s in with_dp and got else got):
            if abs(g - v[0]) > 1e-4:
                print(f"  {s}: {k} loss {g} differs from one process's {v[0]}"); bad += 1
    result[s] = (max(a for a, _, _ in stats), min(t for _, t, _ in stats), max(p for _, _, p in stats))
ddp = result.get("ddp")
print(f"{model}, T = {T}, batch {B}: one process ({threads} threads): activation {base_act / 2**20:.1f} MiB, {base_tps:.0f} tokens/s, "
      f"peak {base_peak / 2**20:.0f} MiB" + ("" if ddp else f" (no DDP: batch {B} does not split over {nproc} processes)"))
for s in runs[1:]:
    act, tps, peak = result[s]
    vs_ddp = f"; vs DDP: activation {act / ddp[0]:.3f} x, tokens/s {tps / ddp[1]:.2f} x" if ddp and s != "ddp" else ""
    print(f"{label[s]:<9}: activation per rank {act / 2**20:.1f} MiB = {act / base_act:.3f} x one process; "
          f"{tps:.0f} tokens/s = {tps / base_tps:.2f} x; peak per rank {peak / 2**20:.0f} MiB{vs_ddp}; "
          f"losses (all {len(one)} steps, resumed) equal one process's" + (" (mean over ranks)" if s in with_dp else ""))
sys.exit(1 if bad else 0)
PY
