#!/usr/bin/env bash
# check_wheel.sh ROOT BUILD: builds the wheel (scripts/package.sh wheel), installs it into a fresh
# `python3 -m venv --system-site-packages` (LibTorch's Python package stays the system's), and runs from outside
# the tree: the two-step consumer (libaccel from the venv's accel/ folder) and examples/python/train_mlp.py, the
# quick tour's program, to its accuracy check.
root=$1 build=$2
. "$root/tests/packages/lib.sh"
make_work
bash "$root/scripts/package.sh" --no-build --out "$work/dist" wheel >"$work/package.log" 2>&1 || {
  cat "$work/package.log" >&2; exit 1; }
wheel=$(ls "$work"/dist/accel-*.whl)
echo "wheel: $(basename "$wheel")"
expect_license "the wheel's METADATA" "$(unzip -p "$wheel" '*.dist-info/METADATA')"
# The listing is read whole: grep -q stopping early would kill unzip with SIGPIPE and fail the pipeline.
listing=$(unzip -l "$wheel")
grep -q "dist-info/LICENSE" <<<"$listing" || { echo "FAIL: the wheel has no dist-info/LICENSE" >&2; exit 1; }
clean_env /usr/bin/python3 -m venv --system-site-packages "$work/venv"
clean_env "$work/venv/bin/pip" install --quiet --no-index --no-deps "$wheel"
site=$(clean_env "$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
cp "$root/tests/packages/consumer/train_two_steps.py" "$root/examples/python/train_mlp.py" \
  "$root/examples/python/progress.py" "$work/"
out=$(cd "$work" && clean_env PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python" train_two_steps.py)
echo "$out"; expect_two_steps "$out"; expect_loaded_from "$out" "$site/accel" "$build"
(cd "$work" && clean_env PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python" train_mlp.py | tail -n 2)
echo "packages.wheel: passed"
