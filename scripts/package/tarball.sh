#!/usr/bin/env bash
# The tarball: `cmake --install --strip` of every component into a staging prefix, packed as
# accel-<version>-linux-x86_64/. The .pc file and the CMake package find their prefix from where they lie
# (${pcfiledir}, CMAKE_CURRENT_LIST_DIR), the accel command and the binding modules find libaccel by $ORIGIN,
# so the tree works wherever it is unpacked. Called by scripts/package.sh (ACCEL_BUILD, ACCEL_DIST, ACCEL_VERSION).
set -euo pipefail
name=accel-$ACCEL_VERSION-linux-x86_64
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cmake --install "$ACCEL_BUILD" --prefix "$stage/$name" --strip >/dev/null
cp "$ACCEL_ROOT/CHANGELOG.md" "$ACCEL_ROOT/LICENSE" "$stage/$name/"
tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$ACCEL_DIST/$name.tar.gz" "$name"
echo "tarball: $ACCEL_DIST/$name.tar.gz"
