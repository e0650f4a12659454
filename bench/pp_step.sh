#!/usr/bin/env bash
# Pipeline parallelism vs one process (the baseline, same run): a 4-block GPT (n_embd 256, T tokens, a batch of
# B rows, SGD) trained with train_step in one process and as pp 2 (two processes, one stage each) with GPipe,
# 1F1B and interleaved 1F1B (num_layers_per_virtual_pipeline_stage 1: 2 chunks of one block per stage) over M
# micro-batches. Prints per schedule: seconds per step vs one process, the bubble two ways against the theory
# ((p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v m+p-1) interleaved), and each stage's activation memory (growth
# of the resident set during the first step). The bubble "vs one process" is 1 - (one process's step / p) /
# (the pipeline's step), which assumes balanced stages (4 equal blocks; the first stage also embeds, the last
# also runs the head and the loss); "per stage" is each stage's own idle share of its schedule as the pipeline
# measures it (wall time minus its forwards, losses and backwards: waiting on neighbours and the transfers);
# "after its last op" is the part of that wall after the stage's last operation (the tied embedding's exchange and
# the loss's broadcast, where a stage whose schedule ended first waits for the others).
# Also checks that every step's loss equals one process's (within 1e-4: float32 sums in another order).
# One process gets OMP_NUM_THREADS=1 like each stage, so the comparison is per core.
# VOCAB (default 2048) and LAYERS (4) reshape the model: e.g. 256 and 8 give stages of nearly equal work (the
# head's share shrinks), the theory's assumption; each stage's busy seconds per step are printed to show the balance.
# DDP over the same processes trains the same global batch in the same run (split_batches: B / NPROC rows per rank;
# the mean of its ranks' losses must equal one process's), and every run prints its tokens/s and per-rank peak
# resident set against one process and against DDP.
# NPROC=4 (default 2): pp 4 (interleaved only when LAYERS gives each stage at least 2 blocks), pp 2 x dp 2 (1F1B)
# and DDP 4; 4 processes of one thread each on a 2-core machine oversubscribe it. MODEL=llama (default gpt): a
# Llama of the same shape (hidden 256, 8 heads; bench/lm_spec.h).
# LAUNCHER=mpirun (default launch: accel launch, Gloo): the processes started by mpirun (the mpi backend).
# Usage: [MODEL=gpt|llama] [NPROC=2|4] [LAUNCHER=launch|mpirun] bash bench/pp_step.sh [BUILD_DIR] [T] [B] [M] [STEPS] [VOCAB] [LAYERS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
T=${2:-256}
B=${3:-16}
M=${4:-8}
steps=${5:-4}
export PP_BENCH_VOCAB=${6:-2048} PP_BENCH_LAYERS=${7:-4}
nproc=${NPROC:-2}
export BENCH_MODEL=${MODEL:-gpt}
case "$nproc" in 2|4) ;; *) echo "NPROC must be 2 or 4, got $nproc" >&2; exit 2 ;; esac
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launch() { # launch NAME CONFIG: the bench under accel launch -n NPROC (LAUNCHER=mpirun: mpirun), one thread per rank
  local starter=("$build/bin/accel" launch -n "$nproc" --main_process_port 0)
  [ "${LAUNCHER:-launch}" = mpirun ] && starter=(mpirun --allow-run-as-root --oversubscribe -np "$nproc" -x OMP_NUM_THREADS=1
    -x PP_BENCH_VOCAB -x PP_BENCH_LAYERS -x BENCH_MODEL)
  OMP_NUM_THREADS=1 "${starter[@]}" "$build/bench/bench_pp_step" "$T" "$B" "$steps" "$2" > "$work/$1.txt"
}
OMP_NUM_THREADS=1 "$build/bench/bench_pp_step" "$T" "$B" "$steps" > "$work/one.txt"
runs="one"
for s in gpipe 1f1b interleaved_1f1b; do
  extra=""
  if [ "$s" = interleaved_1f1b ]; then
    [ $((PP_BENCH_LAYERS / nproc)) -ge 2 ] || continue # one block per stage: no second chunk to interleave
    extra=", \"num_layers_per_virtual_pipeline_stage\": 1"
  fi
  launch "$s" "{\"parallelism_config\": {\"pp_size\": $nproc, \"num_micro_batches\": $M, \"pp_schedule\": \"$s\"$extra}}"
  runs="$runs $s"
done
if [ "$nproc" = 4 ] && [ $((B % 2)) = 0 ]; then
  launch pp2dp2 "{\"split_batches\": true, \"parallelism_config\": {\"pp_size\": 2, \"dp_replicate_size\": 2, \"num_micro_batches\": $M, \"pp_schedule\": \"1f1b\"}}"
  runs="$runs pp2dp2"
fi
if [ $((B % nproc)) = 0 ]; then # split_batches: every rank the same number of rows
  launch ddp '{"split_batches": true}'
  runs="$runs ddp"
fi
python3 - "$work" "$T" "$B" "$M" "$PP_BENCH_LAYERS" "$nproc" "$BENCH_MODEL" $runs <<'PY'
import re, sys
work, T, B, M, layers, nproc, model, runs = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                                            int(sys.argv[6]), sys.argv[7], sys.argv[8:])
def read(name):
    losses, stats, bubbles, tput = {}, {}, {}, {}
    for line in open(f"{work}/{name}.txt"):
        line = re.sub(r"^\[rank\d+\]: ", "", line.strip())
        m = re.match(r"rank (\d+) step (\d+) loss (\S+)", line)
        if m:
            losses.setdefault(int(m.group(2)), []).append(float(m.group(3)))
        m = re.match(r"rank (\d+) world (\d+) activation_bytes (\d+) step_seconds (\S+)", line)
        if m:
            stats[int(m.group(1))] = (int(m.group(3)), float(m.group(4)))
        m = re.match(r"rank (\d+) schedule_wall (\S+) schedule_busy (\S+) bubble (\S+) after_schedule (\S+)", line)
        if m:
            bubbles[int(m.group(1))] = (float(m.group(4)), float(m.group(3)), float(m.group(5)))
        m = re.match(r"rank (\d+) tokens_per_s (\S+) peak_bytes (\d+)", line)
        if m:
            tput[int(m.group(1))] = (float(m.group(2)), int(m.group(3)))
    return losses, stats, bubbles, tput
one, one_stats, _, one_tput = read("one")
base_act, base_t = one_stats[0]
print(f"{model}, T = {T}, batch {B}, {M} micro-batches: one process {base_t:.3f} s/step ({one_tput[0][0]:.0f} tokens/s), "
      f"activation {base_act / 2**20:.1f} MiB, peak {one_tput[0][1] / 2**20:.0f} MiB")
bad, step_s = 0, {}
for s in runs[1:]:
    losses, stats, bubbles, tput = read(s)
    for k, v in one.items():
        got = losses.get(k, [])
        # DDP's and pp x dp's ranks train different rows: the mean of their losses is one process's.
        checked = [sum(got) / len(got)] if s in ("ddp", "pp2dp2") and got else got
        if len(got) != nproc or any(abs(g - v[0]) > 1e-4 for g in checked):
            print(f"  {s}: step {k} losses {got} differ from one process's {v[0]}"); bad += 1
    step_s[s] = (max(st for _, st in stats.values()), stats, bubbles, tput)
ddp_t = step_s["ddp"][0] if "ddp" in step_s else None
if ddp_t is None:
    print(f"  (no DDP: batch {B} does not split over {nproc} processes)")
label = {"pp2dp2": "pp 2 x dp 2 1f1b", "ddp": f"DDP {nproc}"}
for s in runs[1:]:
    t, stats, bubbles, tput = step_s[s]
    p = 2 if s == "pp2dp2" else nproc
    acts = " / ".join(f"{stats[r][0] / 2**20:.1f}" for r in sorted(stats))
    peaks = " / ".join(f"{tput[r][1] / 2**20:.0f}" for r in sorted(tput))
    vs_ddp = f", {ddp_t / t:.2f}x DDP's" if ddp_t else ""
    speed = f"{t:.3f} s/step = {base_t / t:.2f}x one process's speed{vs_ddp} ({B * int(T) / t:.0f} tokens/s)"
    mem = f"activation per rank {acts} MiB; peak per rank {peaks} MiB"
    if s == "ddp":
        print(f"{label[s]:<21}: {speed}; {mem}; losses equal one process's (mean over ranks)"); continue
    v = layers // p if s == "interleaved_1f1b" else 1 # chunks of one block each
    theory = (p - 1) / (v * M + p - 1)
    bubble = 1 - (base_t / nproc) / t
    per_stage = " / ".join(f"{bubbles[r][0]:.3f}" for r in sorted(bubbles))
    busy = " / ".join(f"{bubbles[r][1]:.3f}" for r in sorted(bubbles))
    after = " / ".join(f"{bubbles[r][2]:.3f}" for r in sorted(bubbles))
    print(f"{label.get(s, f'pp {p} {s}'):<21}: {speed}; bubble vs one process {bubble:.3f}, "
          f"per stage {per_stage} (theory {theory:.3f}; busy s/step {busy}; after its last op s/step {after}); "
          f"{mem}; losses equal one process's")
sys.exit(1 if bad else 0)
PY
