#!/usr/bin/env sh
# Regenerates src/bindings.rs from the public headers with Debian's bindgen (apt-get install bindgen):
#   ACCEL_INCLUDE_DIRS=/path/include:/path/build/include sh generate.sh > src/bindings.rs
# The functions are those of the ABI listed in symbols.txt (add a name there, then rerun). The test
# tests/headers.rs runs this script and fails if any declaration in src/bindings.rs differs from it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindgen=${ACCEL_BINDGEN:-bindgen}
incs=""
old_ifs=$IFS; IFS=:
for d in ${ACCEL_INCLUDE_DIRS:-$here/../../../include:$here/../../../build/include}; do incs="$incs -I$d"; done
IFS=$old_ifs
allow=$(sed -e '/^#/d' -e '/^$/d' "$here/symbols.txt" | paste -sd '|' -)
# shellcheck disable=SC2086
"$bindgen" "$here/wrapper.h" \
  --allowlist-function "^($allow)\$" --allowlist-type '^accel_.*' --allowlist-var '^ACCEL_.*' \
  --no-layout-tests --no-doc-comments --use-core --ctypes-prefix 'core::ffi' --size_t-is-usize \
  --raw-line '#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]' \
  -- $incs
