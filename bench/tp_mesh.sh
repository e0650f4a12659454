#!/usr/bin/env bash
# Issue 33's benchmark: the 8-block GPT trained by bench_tp_step (AdamW, batch 4 per data-parallel rank, T tokens)
# on 2 and 4 Gloo processes of one thread each, in one run: DDP, FULL_SHARD, tp 2, tp 2 + sequence parallelism, and on
# 4 processes DDP, tp 2 x FSDP 2 with and without sequence parallelism. Per configuration: seconds per step (median),
# tokens/s over the job (batch x T x data-parallel ranks / step), each rank's parameter + AdamW-state bytes (the
# accelerator's memory stats; the largest rank) and peak RSS, and their ratios to DDP on the same number of processes.
# Usage: bash bench/tp_mesh.sh [BUILD_DIR] [T] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
T=${2:-256}
steps=${3:-6}
source scripts/blas-env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export BENCH_SPEC="{\"type\": \"gpt\", \"vocab_size\": 8192, \"n_positions\": $T, \"n_embd\": 256, \"n_layer\": 8, \"n_head\": 8}"
sp='"tp_handler": {"sequence_parallel": true}'
run() { # name processes config
    OMP_NUM_THREADS=1 BENCH_ACCEL_CONFIG="$3" "$build/bin/accel" launch -n "$2" --main_process_port 0 \
        "$build/bench/bench_tp_step" "$T" "$steps" > "$work/$1.txt"
}
run ddp2 2 '{}'
run fsdp2 2 '{"fsdp_plugin": {"sharding_strategy": "FULL_SHARD"}}'
run tp2 2 '{"parallelism_config": {"tp_size": 2}}'
run tp2sp 2 "{\"parallelism_config\": {\"tp_size\": 2, $sp}}"
run ddp4 4 '{}'
run tp2fsdp2 4 '{"parallelism_config": {"tp_size": 2, "dp_shard_size": 2}, "fsdp_plugin": {}}'
run tp2fsdp2sp 4 "{\"parallelism_config\": {\"tp_size\": 2, \"dp_shard_size\": 2, $sp}, \"fsdp_plugin\": {}}"
python3 - "$work" "$T" <<'PY'
import json, re, sys
work, T = sys.argv[1], int(sys.argv[2])
def read(name):
    ranks = []
    for line in open(f"{work}/{name}.txt"):
        line = re.sub(r"^\[rank\d+\]: ", "", line.strip())
        m = re.match(r"rank (\d+) seconds_per_step (\S+) peak_rss_mib (\S+) memory (.*)", line)
        if m:
            mod = json.loads(m.group(4))["models"][0]
            ranks.append((float(m.group(2)), float(m.group(3)), mod["parameter_bytes"] + mod["optimizer_state_bytes"]))
    return max(r[0] for r in ranks), max(r[1] for r in ranks), max(r[2] for r in ranks)
rows = [("DDP", "ddp2", 2, 2), ("FULL_SHARD", "fsdp2", 2, 2), ("tp 2", "tp2", 2, 1), ("tp 2 + SP", "tp2sp", 2, 1),
        ("DDP", "ddp4", 4, 4), ("tp 2 x FSDP 2", "tp2fsdp2", 4, 2), ("tp 2 x FSDP 2 + SP", "tp2fsdp2sp", 4, 2)]
print(f"8-block GPT (n_embd 256, vocabulary 8192), T {T}, batch 4 per data-parallel rank, AdamW, Gloo, 1 thread each")
print("| configuration | processes | s/step | tokens/s | x DDP | state per rank MiB | x DDP | peak RSS MiB | x DDP |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
base = {}
for label, name, procs, dp in rows:
    sec, rss, state = read(name)
    tok = 4 * T * dp / sec
    b = base.setdefault(procs, (tok, state, rss))
    print(f"| {label} | {procs} | {sec:.3f} | {tok:.0f} | {tok / b[0]:.2f} | {state / 2**20:.1f} | {state / b[1]:.3f} "
          f"| {rss:.0f} | {rss / b[2]:.2f} |")
PY
