#!/usr/bin/env bash
# Pipeline checkpoints' memory per rank (bench/pp_checkpoint_memory.c: an 8-block GPT of 119 MB, one AdamW step):
# save_model and save_state under pp 2, stage by stage (each stage writes its shards; save_state gathers onto the
# main process's stage only) and whole (save_on_each_node: every rank borrows the whole model, the way before).
# Then load_state of a save_state folder (each stage reads its own tensors now; "whole" there only differs in the save).
# Prints per rank the peak growth of the resident set during the save (or the load).
# Usage: bash bench/pp_checkpoint_memory.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin="$build/bench/bench_pp_checkpoint_memory"
for save in model state load; do
  for mode in stage whole; do
    each=$([ "$mode" = whole ] && echo true || echo false)
    OMP_NUM_THREADS=1 "$build/bin/accel" launch -n 2 --main_process_port 0 "$bin" "$save" "$work/$save.$mode" \
      "{\"parallelism_config\": {\"pp_size\": 2, \"num_micro_batches\": 2}, \"project_config\": {\"save_on_each_node\": $each}}" \
      > "$work/$save.$mode.txt"
    rm -rf "$work/$save.$mode"
  done
done
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
MB = 1e6
print("| save | rank | stage's parameters MB | peak MB, whole on every rank (before) | peak MB, by stage (now) |")
print("|---|---|---|---|---|")
for save in ("model", "state", "load"):
    rows = {}
    for mode in ("whole", "stage"):
        for line in open(f"{work}/{save}.{mode}.txt"):
            m = re.search(r"rank (\d+) save \w+ held_bytes (\d+) save_peak_bytes (-?\d+)", line)
            if m:
                rows.setdefault(int(m.group(1)), {})[mode] = (int(m.group(2)), int(m.group(3)))
    for rank in sorted(rows):
        r = rows[rank]
        before = "-" if save == "load" else f"{r['whole'][1] / MB:.1f}"  # load_state has one path now
        print(f"| {'load_state' if save == 'load' else 'save_' + save} | {rank} | {r['stage'][0] / MB:.1f} | {before} | {r['stage'][1] / MB:.1f} |")
PY
