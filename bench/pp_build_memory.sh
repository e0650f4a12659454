#!/usr/bin/env bash
# Pipeline parallelism's build memory per rank (bench/pp_build_memory.c: an 8-block GPT of 119 MB): one process,
# then pp 2 and pp 4 with each rank building only its stage (the model built while the accelerator lives), and pp 2
# with the whole model built first on every rank and cut at prepare (the model built before the accelerator: the way
# before stage_init). Prints per rank the parameter MB held as built and after prepare, and the peak growth of the
# resident set during the build, each against one process's whole model.
# Usage: bash bench/pp_build_memory.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin="$build/bench/bench_pp_build_memory"
OMP_NUM_THREADS=1 "$bin" stage > "$work/one.txt"
for run in "2 stage" "4 stage" "2 whole"; do
  set -- $run
  OMP_NUM_THREADS=1 "$build/bin/accel" launch -n "$1" --main_process_port 0 "$bin" "$2" \
    "{\"parallelism_config\": {\"pp_size\": $1, \"num_micro_batches\": $1}}" > "$work/pp$1_$2.txt"
done
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
def read(name):
    out = []
    for line in open(f"{work}/{name}.txt"):
        m = re.search(r"rank (\d+) mode (\w+) built_bytes (\d+) build_peak_bytes (-?\d+) prepared_bytes (\d+)", line)
        if m:
            out.append(tuple(int(m.group(i)) for i in (1, 3, 4, 5)))
    return sorted(out)
(_, whole, one_peak, _), = read("one")
MB = 1e6
print(f"one process: parameters {whole / MB:.1f} MB, build peak +{one_peak / MB:.1f} MB")
print("| run | rank | built MB (x whole) | build peak MB (x one process's) | after prepare MB |")
print("|---|---|---|---|---|")
for name, label in (("pp2_stage", "pp 2, stage built"), ("pp4_stage", "pp 4, stage built"), ("pp2_whole", "pp 2, whole then cut")):
    for rank, built, peak, prepared in read(name):
        print(f"| {label} | {rank} | {built / MB:.1f} ({built / whole:.2f}) | {peak / MB:.1f} ({peak / one_peak:.2f}) | {prepared / MB:.1f} |")
PY
