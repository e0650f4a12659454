# Sourced by the packages tests (tests/packages/check_*.sh): the build tree is out of reach of what they run.
set -euo pipefail

# make_work: a temporary folder outside the build tree (work), removed at exit unless ACCEL_KEEP_WORK=1.
make_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/accel-packages.XXXXXX")
  [ "${ACCEL_KEEP_WORK:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
}

# Runs a command with no LD_LIBRARY_PATH, PYTHONPATH or CLASSPATH inherited (the tests' environment may point at
# the build tree); the caller passes what the installed package needs explicitly.
clean_env() {
  env -u LD_LIBRARY_PATH -u PYTHONPATH -u CLASSPATH -u LIBRARY_PATH -u CPATH -u PKG_CONFIG_PATH \
    -u CMAKE_PREFIX_PATH "$@"
}

# expect_loaded_from OUTPUT DIR BUILD: the consumer's "accel X from PATH" line names a libaccel under DIR
# and not under the build tree BUILD.
expect_loaded_from() {
  local output=$1 dir=$2 build=$3 lib
  lib=$(printf '%s\n' "$output" | sed -n 's/^accel [^ ]* from \([^:]*\):.*/\1/p' | head -n1)
  lib=$(readlink -m "$lib")  # -m: the jar's extracted copy is deleted when its JVM exits
  case "$lib" in
    "$(readlink -f "$dir")"/*) ;;
    *) echo "FAIL: libaccel came from '$lib', not from $dir" >&2; return 1 ;;
  esac
  case "$lib" in
    "$(readlink -f "$build")"/*) echo "FAIL: libaccel came from the build tree ($lib)" >&2; return 1 ;;
  esac
  echo "ok: libaccel loaded from $lib"
}

# expect_two_steps OUTPUT: the consumer trained two steps (its last line says so).
expect_two_steps() {
  grep -q ": 2 steps, loss " <<<"$1" || { echo "FAIL: no '2 steps' line in: $1" >&2; return 1; }
}

# expect_license WHAT TEXT: a package's license statement or file (TEXT) names Apache-2.0 or its URL (the nuspec of
# Debian's NuGet 2.8 has licenseUrl, no license expression), as LICENSE does.
expect_license() {
  grep -q "Apache-2.0\|Apache License\|apache.org/licenses/LICENSE-2.0" <<<"$2" || { echo "FAIL: $1 states no license (Apache-2.0)" >&2; return 1; }
  echo "ok: $1 states the license"
}
