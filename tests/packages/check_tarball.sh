#!/usr/bin/env bash
# check_tarball.sh ROOT BUILD: builds the tarball (scripts/package.sh tarball), unpacks it in a temporary folder, builds
# tests/packages/consumer against it with pkg-config and, after moving the tree elsewhere, with find_package(accel),
# and runs each (two training steps, libaccel from the unpacked tree), then the tarball's `accel env`.
root=$1 build=$2
. "$root/tests/packages/lib.sh"
consumer=$root/tests/packages/consumer
make_work
bash "$root/scripts/package.sh" --no-build --out "$work/dist" tarball >/dev/null
tarball=$(ls "$work"/dist/accel-*-linux-x86_64.tar.gz)
mkdir -p "$work/opt" && tar -C "$work/opt" -xzf "$tarball"
prefix=$(ls -d "$work"/opt/accel-*)
for d in include/accel lib lib/pkgconfig lib/cmake/accel bin; do
  [ -d "$prefix/$d" ] || { echo "FAIL: the tarball has no $d/" >&2; exit 1; }
done
expect_license "the tarball's LICENSE" "$(cat "$prefix/LICENSE" 2>/dev/null)"
[ -f "$prefix/include/accel/accel.hpp" ] || { echo "FAIL: the tarball has no include/accel/accel.hpp" >&2; exit 1; }

# 1. pkg-config, from where the tarball was unpacked (${pcfiledir}).
flags=$(clean_env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs accel)
clean_env cc -std=c99 -Wall -Werror "$consumer/train_two_steps.c" $flags -ldl -o "$work/consumer_pc"
out=$(clean_env LD_LIBRARY_PATH="$prefix/lib" "$work/consumer_pc")
echo "$out"
expect_two_steps "$out"
expect_loaded_from "$out" "$prefix/lib" "$build"

# 2. The same tree moved: find_package(accel) finds it relative to its config file.
mkdir -p "$work/moved" && mv "$prefix" "$work/moved/" && prefix=$work/moved/$(basename "$prefix")
clean_env cmake -S "$consumer" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
clean_env cmake --build "$work/cmake" >/dev/null
out=$(clean_env "$work/cmake/train_two_steps")
echo "$out"
expect_two_steps "$out"
expect_loaded_from "$out" "$prefix/lib" "$build"

# 3. The accel command finds libaccel by its $ORIGIN RUNPATH.
clean_env "$prefix/bin/accel" env >"$work/env.txt"
lib=$(clean_env ldd "$prefix/bin/accel" | sed -n 's/.*libaccel\.so\.[0-9]* => \([^ ]*\).*/\1/p')
case "$(readlink -f "$lib")" in
  "$(readlink -f "$prefix")"/*) echo "ok: bin/accel uses $lib" ;;
  *) echo "FAIL: bin/accel uses '$lib'" >&2; exit 1 ;;
esac
echo "packages.tarball: passed"
