#!/usr/bin/env bash
# Builds accel's installable artifacts into dist/ (or --out DIR):
#   tarball  accel-<version>-linux-x86_64.tar.gz  (include/, lib/, bin/, lib/pkgconfig, lib/cmake; relocatable)
#   deb      libaccel1, libaccel-dev, accel-tools, python3-accel  (CPack, cmake/accel_packaging.cmake)
#   wheel    accel-<version>-cp3X-cp3X-linux_x86_64.whl  (SWIG module + libaccel, python3 -m build)
#   jar      accel-<version>.jar + accel-<version>.pom  (JNI library and libaccel under native/linux-amd64/)
#   nupkg    Accel.<version>.nupkg  (Accel.dll under lib/net45/, the native libraries under runtimes/linux-x64/native/)
#   crates   accel-sys-<version>.crate, accel-<version>.crate  (cargo package; accel-sys finds libaccel by pkg-config)
# Usage: bash scripts/package.sh [--no-build] [--out DIR] [tarball|deb|wheel|jar|nupkg|crates ...]   (default: all)
# The version of every artifact is project(accel VERSION ...) in CMakeLists.txt. The build folder is
# ${ACCEL_BUILD_DIR:-build}; without --no-build it is configured and built first (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$root/dist
build=1
kinds=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
    --no-build) build=0; shift ;;
    tarball|deb|wheel|jar|nupkg|crates) kinds+=("$1"); shift ;;
    *) echo "package.sh: unknown argument '$1' (expected --out DIR, --no-build, tarball, deb, wheel, jar, nupkg or crates)" >&2
       exit 2 ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(tarball deb wheel jar nupkg crates)

export ACCEL_ROOT=$root
export ACCEL_BUILD=$(cd "$root" && mkdir -p "${ACCEL_BUILD_DIR:-build}" && cd "${ACCEL_BUILD_DIR:-build}" && pwd)
export ACCEL_DIST=$out
ACCEL_VERSION=$(sed -n 's/^project(accel VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
export ACCEL_VERSION
[ -n "$ACCEL_VERSION" ] || { echo "package.sh: no project(accel VERSION x.y.z) in CMakeLists.txt" >&2; exit 1; }

[ $build = 0 ] || bash scripts/build.sh
built=$(sed -n 's/^Version: //p' "$ACCEL_BUILD/accel.pc")
if [ "$built" != "$ACCEL_VERSION" ]; then
  echo "package.sh: $ACCEL_BUILD was configured for version $built, CMakeLists.txt says $ACCEL_VERSION: rebuild" >&2
  exit 1
fi
mkdir -p "$out"
for k in "${kinds[@]}"; do
  start=$SECONDS
  bash "scripts/package/$k.sh"
  echo "package.sh: $k done in $((SECONDS - start)) s"
done
ls -l "$out"
