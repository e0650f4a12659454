#!/usr/bin/env bash
# The hardening pass (docs/development/sanitizers.md), run by scripts/test.sh after the main suite:
# accel built with clang-14, warnings as errors, AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer
# coverage into ${ACCEL_SANITIZE_BUILD_DIR:-build-asan}; then, under the sanitizers with leak detection on
# (tests/sanitizers/*.supp), the unit and capi labels, the distributed tests labelled "sanitize" (one of each
# mechanism, see tests/distributed/CMakeLists.txt) and a short run of every fuzz target (label fuzz,
# ACCEL_FUZZ_SECONDS each). ACCEL_SANITIZE_ALL=1 takes every distributed test instead (about an hour here).
# Time limits of tests are scaled for the sanitizers (ACCEL_TEST_TIMEOUT_SCALE). Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ACCEL_SANITIZE_BUILD_DIR:-build-asan}
# One folder serves three purposes (a clang build, the sanitizer suite, the fuzz targets): one more build,
# not three. Bindings and benchmarks are left out (a JVM or Python would need the ASan runtime preloaded).
CC=clang-14 CXX=clang++-14 ACCEL_BUILD_DIR="$build" bash scripts/build.sh \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DACCEL_SANITIZE=address,undefined -DACCEL_FUZZ=ON -DACCEL_BUILD_BINDINGS=OFF -DACCEL_BUILD_BENCH=OFF \
  -DACCEL_FUZZ_SECONDS="${ACCEL_FUZZ_SECONDS:-20}"
source scripts/sanitizer-env.sh
labels='^(unit|capi|fuzz|sanitize)$'
[ "${ACCEL_SANITIZE_ALL:-0}" = 1 ] && labels='^(unit|capi|fuzz|distributed)$'
echo "accel: the sanitizer pass (ctest -L '$labels' in $build)"
ctest --test-dir "$build" --output-on-failure -j2 -L "$labels" "$@"
