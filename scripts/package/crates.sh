#!/usr/bin/env bash
# The Rust crates accel-sys-<version>.crate and accel-<version>.crate by `cargo package --workspace --offline`
# (each is verified by building it from the packaged files). accel-sys's build script finds an installed libaccel
# with pkg-config (ACCEL_LIB_DIR, when set, wins). Cargo.toml cannot read CMakeLists.txt's version, so the
# crates are packed from a copy of the workspace whose versions (each crate's and accel's dependency on
# accel-sys) are set to it: a version bump in CMakeLists.txt alone changes every artifact. Called by
# scripts/package.sh.
set -euo pipefail
rust=$ACCEL_ROOT/bindings/rust
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/src"
tar -C "$rust" --exclude=./target -cf - . | tar -C "$stage/src" -xf -
for c in accel-sys accel; do
  sed -i -e '0,/^version = ".*"/s//version = "'"$ACCEL_VERSION"'"/' \
    -e 's/^\(accel-sys = {.*version = "\)[^"]*"/\1'"$ACCEL_VERSION"'"/' "$stage/src/$c/Cargo.toml"
  grep -q "^version = \"$ACCEL_VERSION\"" "$stage/src/$c/Cargo.toml" || {
    echo "crates: could not set $c's version to $ACCEL_VERSION" >&2; exit 1; }
done
(cd "$stage/src" && CARGO_TARGET_DIR="$stage/target" "$cargo" package --offline --workspace --allow-dirty \
  >"$stage/package.log" 2>&1) || { cat "$stage/package.log" >&2; exit 1; }
rm -f "$ACCEL_DIST"/accel-*.crate
cp "$stage"/target/package/accel-sys-"$ACCEL_VERSION".crate "$stage"/target/package/accel-"$ACCEL_VERSION".crate \
  "$ACCEL_DIST/"
echo "crates: $(ls "$ACCEL_DIST"/accel-*.crate | tr '\n' ' ')"
