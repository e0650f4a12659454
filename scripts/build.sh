#!/usr/bin/env bash
# Configures and builds accel into ${ACCEL_BUILD_DIR:-build}. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ACCEL_BUILD_DIR:-build}
# CMake may find pyenv's Python first; the system one is the one with the test tools.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=/usr/bin/python3 "$@" >/dev/null
# -j2: a LibTorch translation unit needs ~1 GB and these machines have 2 cores.
ninja -C "$build" -j2
