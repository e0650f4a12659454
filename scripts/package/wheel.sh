#!/usr/bin/env bash
# The wheel: the installed Python package (component python: the SWIG module _core.so and the .py files) with
# libaccel.so.<ABI> beside the module, which finds it by its $ORIGIN RUNPATH; built by `python3 -m build --wheel
# --no-isolation` (Debian's python3-build, setuptools) from a generated folder. The wheel is tagged for this
# Python and linux_x86_64: libaccel's own dependencies (LibTorch 1.13, cJSON, yaml-cpp, protobuf, Open MPI) are
# the system's, as libaccel1's Depends list them. Called by scripts/package.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
stage_components "$stage/install" python runtime
src=$stage/src
pkg=$(dirname "$(find "$stage/install" -name _core.so -path '*/accel/*' | head -n1)")
[ -d "$pkg" ] || { echo "wheel: the build has no Python module (ACCEL_BUILD_PYTHON=OFF?)" >&2; exit 1; }
mkdir -p "$src"
cp -r "$pkg" "$src/accel"
cp "$ACCEL_ROOT/LICENSE" "$src/"
copy_libaccel "$stage/install" "$src/accel" >/dev/null
python=/usr/bin/python3
pyver=$($python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
pynext=$($python -c 'import sys; print("%d.%d" % (sys.version_info[0], sys.version_info[1] + 1))')
cat >"$src/pyproject.toml" <<TOML
[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "accel"
version = "$ACCEL_VERSION"
description = "Accelerate-style distributed training for any language, via a C ABI (Python bindings)"
requires-python = ">=$pyver,<$pynext"
license = {text = "Apache-2.0"}

[tool.setuptools]
packages = ["accel"]
include-package-data = false

[tool.setuptools.package-data]
accel = ["*.so", "*.so.*"]
TOML
# A binary distribution: the wheel gets this interpreter's and platform's tags, not py3-none-any.
cat >"$src/setup.py" <<'PY'
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution)
PY
(cd "$src" && $python -m build --wheel --no-isolation --outdir "$stage/wheel" >"$stage/build.log" 2>&1) || {
  cat "$stage/build.log" >&2; exit 1; }
rm -f "$ACCEL_DIST"/accel-*.whl
cp "$stage"/wheel/*.whl "$ACCEL_DIST/"
echo "wheel: $(ls "$ACCEL_DIST"/accel-*.whl)"
