#!/usr/bin/env bash
# check_crates.sh ROOT BUILD: packages the crates (scripts/package.sh crates) and the tarball, unpacks the tarball
# as the installed libaccel, serves the .crate files as a local directory registry (crates.io replaced, offline),
# and builds tests/packages/consumer/rust, which depends on accel = "<version>": accel-sys's build script finds
# libaccel with pkg-config alone (no ACCEL_LIB_DIR); the program trains two steps with libaccel from the tarball.
root=$1 build=$2
. "$root/tests/packages/lib.sh"
make_work
bash "$root/scripts/package.sh" --no-build --out "$work/dist" crates tarball >"$work/package.log" 2>&1 || {
  cat "$work/package.log" >&2; exit 1; }
mkdir -p "$work/opt" "$work/registry" && tar -C "$work/opt" -xzf "$work"/dist/accel-*-linux-x86_64.tar.gz
prefix=$(ls -d "$work"/opt/accel-*)
for crate in "$work"/dist/*.crate; do
  tar -C "$work/registry" -xzf "$crate"
  name=$(basename "$crate" .crate)
  # A directory source checks the .crate's digest and, here, no file list.
  printf '{"files":{},"package":"%s"}' "$(sha256sum "$crate" | cut -d' ' -f1)" >"$work/registry/$name/.cargo-checksum.json"
done
cp -r "$root/tests/packages/consumer/rust" "$work/consumer"
mkdir -p "$work/consumer/.cargo"
cat >"$work/consumer/.cargo/config.toml" <<TOML
[source.crates-io]
replace-with = "packaged"
[source.packaged]
directory = "$work/registry"
TOML
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
(cd "$work/consumer" && clean_env -u ACCEL_LIB_DIR PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CARGO_TARGET_DIR="$work/target" \
  "$cargo" build --offline --quiet) >"$work/cargo.log" 2>&1 || { cat "$work/cargo.log" >&2; exit 1; }
out=$(cd "$work" && clean_env -u ACCEL_LIB_DIR LD_LIBRARY_PATH="$prefix/lib" "$work/target/debug/train-two-steps")
echo "$out"; expect_two_steps "$out"; expect_loaded_from "$out" "$prefix/lib" "$build"
echo "packages.crates: passed"
