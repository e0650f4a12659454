#!/usr/bin/env bash
# The long fuzz run (docs/development/sanitizers.md): each target of tests/fuzz, built by scripts/test-sanitizers.sh into
# ${ACCEL_SANITIZE_BUILD_DIR:-build-asan}, runs SECONDS (default 600) over its corpus with its dictionary,
# under ASan + UBSan with leak detection. Prints the executions per target and their total; exits non-zero
# on any finding (the input is kept in build-asan/tests/fuzz/findings/). New inputs are kept in
# build-asan/tests/fuzz/corpus/ (the seed corpus in the repository is only read).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. nice -n 19 scripts/fuzz.sh 1200
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ACCEL_SANITIZE_BUILD_DIR:-build-asan}
secs=${1:-600}
[ $# -gt 0 ] && shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do t=${f##*/fuzz_}; targets+=("${t%.cpp}"); done
fi
source scripts/sanitizer-env.sh
# Absolute paths: a harness may chdir (fuzz_files_config works in a folder of its own), and libFuzzer writes new
# inputs and findings into these folders after that.
out=$(cd "$build" 2>/dev/null && pwd)/tests/fuzz
seeds=$PWD/tests/fuzz
mkdir -p "$out/findings"
total=0
status=0
for t in "${targets[@]}"; do
  [ -x "$out/fuzz_$t" ] || { echo "fuzz.sh: $out/fuzz_$t is not built (run scripts/test-sanitizers.sh)" >&2; exit 2; }
  mkdir -p "$out/corpus/$t"
  log=$out/fuzz_$t.log
  result=clean
  if ! OMP_NUM_THREADS=1 "$out/fuzz_$t" -max_total_time="$secs" -timeout=120 -rss_limit_mb=4096 -print_final_stats=1 \
      -dict="$seeds/$t.dict" -artifact_prefix="$out/findings/$t-" "$out/corpus/$t" "$seeds/corpus/$t" \
      >"$log" 2>&1; then
    result="FINDING (see $log)"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  runs=${runs:-0}
  total=$((total + runs))
  printf '%-20s %12d executions in %d s, corpus %d inputs: %s\n' "$t" "$runs" "$secs" \
    "$(find "$out/corpus/$t" -type f | wc -l)" "$result"
done
printf '%-20s %12d executions\n' total "$total"
exit $status
