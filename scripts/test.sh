#!/usr/bin/env bash
# Runs every test: installs what is missing, builds, then ctest (unit, capi, headers, abi, example).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir "${ACCEL_BUILD_DIR:-build}" --output-on-failure -j2 "$@"
