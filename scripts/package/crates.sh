#!/usr/bin/env bash
# The Rust crates accel-sys-<version>.crate and accel-<version>.crate by `cargo package --workspace --offline`
# (each is verified by building it from the packaged files). accel-sys's build script finds an installed libaccel
# with pkg-config (ACCEL_LIB_DIR, when set, wins). Cargo.toml cannot read CMakeLists.txt's version, so this
# refuses crates whose version differs from it. Called by scripts/package.sh.
set -euo pipefail
rust=$ACCEL_ROOT/bindings/rust
for c in accel-sys accel; do
  v=$(sed -n 's/^version = "\(.*\)"/\1/p' "$rust/$c/Cargo.toml" | head -n1)
  [ "$v" = "$ACCEL_VERSION" ] || {
    echo "crates: $c/Cargo.toml says version $v, CMakeLists.txt $ACCEL_VERSION: bump it too" >&2; exit 1; }
done
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
(cd "$rust" && CARGO_TARGET_DIR="$stage/target" "$cargo" package --offline --workspace --allow-dirty \
  >"$stage/package.log" 2>&1) || { cat "$stage/package.log" >&2; exit 1; }
rm -f "$ACCEL_DIST"/accel-*.crate
cp "$stage"/target/package/accel-sys-"$ACCEL_VERSION".crate "$stage"/target/package/accel-"$ACCEL_VERSION".crate \
  "$ACCEL_DIST/"
echo "crates: $(ls "$ACCEL_DIST"/accel-*.crate | tr '\n' ' ')"
