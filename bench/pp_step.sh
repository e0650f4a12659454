#!/usr/bin/env bash
# Pipeline parallelism vs one process (the baseline, same run): a 4-block GPT (n_embd 256, T tokens, a batch of
# B rows, SGD) trained with train_step in one process and as pp 2 (two processes, one stage each) with GPipe,
# 1F1B and interleaved 1F1B (num_layers_per_virtual_pipeline_stage 1: 2 chunks of one block per stage) over M
# micro-batches. Prints per schedule: seconds per step vs one process, the bubble two ways against the theory
# ((p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v m+p-1) interleaved), and each stage's activation memory (growth
# of the resident set during the first step). The bubble "vs one process" is 1 - (one process's step / p) /
# (the pipeline's step), which assumes balanced stages (4 equal blocks; the first stage also embeds, the last
# also runs the head and the loss); "per stage" is each stage's own idle share of its schedule as the pipeline
# measures it (wall time minus its forwards, losses and backwards: waiting on neighbours and the transfers).
# Also checks that every step's loss equals one process's (within 1e-4: float32 sums in another order).
# One process gets OMP_NUM_THREADS=1 like each stage, so the comparison is per core.
# VOCAB (default 2048) and LAYERS (4) reshape the model: e.g. 256 and 8 give stages of nearly equal work (the
# head's share shrinks), the theory's assumption; each stage's busy seconds per step are printed to show the balance.
# Usage: bash bench/pp_step.sh [BUILD_DIR] [T] [B] [M] [STEPS] [VOCAB] [LAYERS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
T=${2:-256}
B=${3:-16}
M=${4:-8}
steps=${5:-4}
export PP_BENCH_VOCAB=${6:-2048} PP_BENCH_LAYERS=${7:-4}
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=1 "$build/bench/bench_pp_step" "$T" "$B" "$steps" > "$work/one.txt"
for s in gpipe 1f1b interleaved_1f1b; do
  extra=""
  [ "$s" = interleaved_1f1b ] && extra=", \"num_layers_per_virtual_pipeline_stage\": 1"
  OMP_NUM_THREADS=1 "$build/bin/accel" launch -n 2 --main_process_port 0 "$build/bench/bench_pp_step" "$T" "$B" "$steps" \
    "{\"parallelism_config\": {\"pp_size\": 2, \"num_micro_batches\": $M, \"pp_schedule\": \"$s\"$extra}}" > "$work/$s.txt"
done
python3 - "$work" "$T" "$B" "$M" "$PP_BENCH_LAYERS" <<'PY'
import re, sys
work, T, B, M, layers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def read(name):
    losses, stats, bubbles = {}, {}, {}
    for line in open(f"{work}/{name}.txt"):
        line = re.sub(r"^\[rank\d+\]: ", "", line.strip())
        m = re.match(r"rank (\d+) step (\d+) loss (\S+)", line)
        if m:
            losses.setdefault(int(m.group(2)), []).append(float(m.group(3)))
        m = re.match(r"rank (\d+) world (\d+) activation_bytes (\d+) step_seconds (\S+)", line)
        if m:
            stats[int(m.group(1))] = (int(m.group(3)), float(m.group(4)))
        m = re.match(r"rank (\d+) schedule_wall (\S+) schedule_busy (\S+) bubble (\S+)", line)
        if m:
            bubbles[int(m.group(1))] = (float(m.group(4)), float(m.group(3)))
    return losses, stats, bubbles
one, one_stats, _ = read("one")
base_act, base_t = one_stats[0]
p = 2
print(f"T = {T}, batch {B}, {M} micro-batches: one process {base_t:.3f} s/step, activation {base_act / 2**20:.1f} MiB")
bad = 0
for s in ("gpipe", "1f1b", "interleaved_1f1b"):
    losses, stats, bubbles = read(s)
    v = layers // p if s == "interleaved_1f1b" else 1 # chunks of one block each
    theory = (p - 1) / (v * M + p - 1)
    for k, v in one.items():
        got = losses.get(k, [])
        if len(got) != p or any(abs(g - v[0]) > 1e-4 for g in got):
            print(f"  {s}: step {k} losses {got} differ from one process's {v[0]}"); bad += 1
    t = max(st for _, st in stats.values())
    bubble = 1 - (base_t / p) / t
    acts = " / ".join(f"{stats[r][0] / 2**20:.1f}" for r in sorted(stats))
    per_stage = " / ".join(f"{bubbles[r][0]:.3f}" for r in sorted(bubbles))
    busy = " / ".join(f"{bubbles[r][1]:.3f}" for r in sorted(bubbles))
    print(f"pp 2 {s:<16}: {t:.3f} s/step = {base_t / t:.2f}x one process's speed; bubble vs one process {bubble:.3f}, "
          f"per stage {per_stage} (theory {theory:.3f}; busy s/step {busy}); activation per stage {acts} MiB; losses equal one process's")
sys.exit(1 if bad else 0)
PY
