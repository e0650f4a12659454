#!/usr/bin/env bash
# The Debian packages (libaccel1, libaccel-dev, accel-tools, python3-accel) by CPack from the build folder's
# CPackConfig.cmake (cmake/accel_packaging.cmake), then lintian on them when it is installed (the tags left
# are explained in docs/get-started/install.md). Called by scripts/package.sh.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && cpack --config "$ACCEL_BUILD/CPackConfig.cmake" -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || {
  cat "$work/cpack.log" >&2; exit 1; }
debs=("$work"/out/*.deb)
[ -e "${debs[0]}" ] || { cat "$work/cpack.log" >&2; echo "deb: cpack made no .deb" >&2; exit 1; }
# dpkg-shlibdeps says nothing when it reads a library being relinked (a build running beside this one): a
# package of ELF files without Depends is such a run, not a package to ship.
for d in "${debs[@]}"; do
  listing=$(dpkg-deb -c "$d")   # whole: grep -q stopping early would SIGPIPE dpkg-deb
  if [ -z "$(dpkg-deb -f "$d" Depends)" ] && grep -q '\.so' <<<"$listing"; then
    cat "$work/cpack.log" >&2
    echo "deb: $(basename "$d") has shared objects but no Depends: was the build folder being relinked? Rerun." >&2
    exit 1
  fi
done
rm -f "$ACCEL_DIST"/*.deb
cp "${debs[@]}" "$ACCEL_DIST/"
for d in "$ACCEL_DIST"/*.deb; do
  echo "deb: $d: $(dpkg-deb -f "$d" Package Version Depends | tr '\n' ' ')"
done
if command -v lintian >/dev/null; then
  lintian --no-tag-display-limit "$ACCEL_DIST"/*.deb || true
fi
