#!/usr/bin/env bash
# Runs every test: installs what is missing, builds, then ctest (unit, capi, headers, abi, example, ...), then
# the hardening pass (scripts/test-sanitizers.sh: a clang-14 build with ASan + UBSan, the unit and capi labels
# and a selection of distributed tests under it, a short run of every fuzz target). Arguments after test.sh go
# to the main ctest run, and then the hardening pass runs only with ACCEL_SANITIZERS=1; ACCEL_SANITIZERS=0
# skips it in any case.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
. scripts/blas-env.sh "${ACCEL_BUILD_DIR:-build}"
ctest --test-dir "${ACCEL_BUILD_DIR:-build}" --output-on-failure -j2 "$@"
default=1
[ $# -eq 0 ] || default=0
if [ "${ACCEL_SANITIZERS:-$default}" != 0 ]; then
  bash scripts/test-sanitizers.sh
fi
