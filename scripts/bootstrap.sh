#!/usr/bin/env bash
# The main job: install what is missing, build accel, and train the example MLP data-parallel with two
# processes under `accel launch` (Gloo on this machine; the same binary runs unchanged as one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build=${ACCEL_BUILD_DIR:-build}
# One thread per process: two processes share the two cores of these machines.
"$build"/bin/accel launch -n 2 --main_process_port 0 --num_cpu_threads_per_process 1 "$build"/examples/train_mlp
