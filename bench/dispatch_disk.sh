#!/usr/bin/env bash
# Generation with disk offload (accel_model_dispatch) in one run: a llama (default 271 M parameters, 1.0 GiB of
# float32; hidden 1024, 16 layers, intermediate 2816, vocabulary 32000) generating 16 tokens fully in memory, with
# half of it on disk and with all of it on disk, each in a process of its own (bench/dispatch_disk.c), and the
# disk's read bandwidth with dd (O_DIRECT: the disk itself, not the page cache) on one of the folder's .dat files.
# Usage: bash bench/dispatch_disk.sh [BUILD_DIR] [FOLDER] [HIDDEN LAYERS INTERMEDIATE VOCAB TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dir=${2:-/tmp/accel-dispatch-bench.$$}
shift $(( $# > 2 ? 2 : $# )) || true
rm -rf "$dir"
trap 'rm -rf "$dir"' EXIT
# BENCH_META=1: the model is written once with save_pretrained and each mode builds it on meta and loads it
# (load_checkpoint_and_dispatch), so the whole model is never in memory (issue 37's ~1 B benchmark:
# BENCH_META=1 bash bench/dispatch_disk.sh build /tmp/d 2048 16 5632 32000 8).
# BENCH_QUANTIZE='"load_in_8bit": true' (with BENCH_META=1): each mode loads through load_and_quantize_model
# (accel_model_quantize with weights_location, device_map and offload_folder) instead, quantized as it loads.
if [[ ${BENCH_META:-0} == 1 ]]; then
    "$build/bench/bench_dispatch_disk" save "$dir/checkpoint" "$@"
    export BENCH_CHECKPOINT="$dir/checkpoint"
    echo "checkpoint: $(du -sm "$dir/checkpoint" | cut -f1) MiB"
fi
for mode in memory half disk; do
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$build/bench/bench_dispatch_disk" "$mode" "$dir/$mode" "$@"
done
big=$(ls -S "$dir/disk"/*.dat | sed -n 1p) # sed reads all of ls's output: no SIGPIPE under pipefail
echo "dd O_DIRECT read of $(basename "$big") ($(( $(stat -c %s "$big") / 1048576 )) MiB):"
dd if="$big" of=/dev/null bs=4M iflag=direct 2>&1 | tail -1
echo "dd through the page cache (what the offload reads hit while the folder is cached):"
dd if="$big" of=/dev/null bs=4M 2>&1 | tail -1
