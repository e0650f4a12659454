#!/usr/bin/env bash
# check_debs.sh ROOT BUILD PYTHON (1 when the Python bindings are built): builds the Debian packages
# (scripts/package.sh deb), checks their names, versions and Depends (from dpkg-shlibdeps: LibTorch, cJSON, yaml-cpp, protobuf; libaccel1 at the same version), that this
# system could install them (dpkg --simulate), unpacks them with dpkg-deb -x into a fresh root, and trains two steps
# through it: tests/packages/consumer built with the root's accel.pc and find_package(accel), the Python module
# of python3-accel, and the root's `accel env`; libaccel must come from the root every time.
root=$1 build=$2 python=$3
. "$root/tests/packages/lib.sh"
consumer=$root/tests/packages/consumer
make_work
bash "$root/scripts/package.sh" --no-build --out "$work/dist" deb >"$work/package.log" 2>&1 || {
  cat "$work/package.log" >&2; exit 1; }
version=$(sed -n 's/^project(accel VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
abi=$(sed -n 's/^set(ACCEL_ABI_VERSION \([0-9]*\)).*/\1/p' "$root/CMakeLists.txt")
packages=(libaccel$abi libaccel-dev accel-tools)
[ "$python" != 1 ] || packages+=(python3-accel)
for p in "${packages[@]}"; do
  deb=$work/dist/${p}_$version-1_amd64.deb
  [ -f "$deb" ] || { echo "FAIL: no $(basename "$deb") (made: $(ls "$work/dist"))" >&2; exit 1; }
  echo "$p: Depends: $(dpkg-deb -f "$deb" Depends)"
done
depends=$(dpkg-deb -f "$work/dist/libaccel${abi}_$version-1_amd64.deb" Depends)
for d in libtorch libcjson libyaml-cpp libprotobuf-lite; do
  case "$depends" in *"$d"*) ;; *) echo "FAIL: libaccel$abi does not depend on $d*: $depends" >&2; exit 1 ;; esac
done
for p in "${packages[@]:1}"; do
  case "$(dpkg-deb -f "$work/dist/${p}_$version-1_amd64.deb" Depends)" in
    *"libaccel$abi (= $version-1)"*) ;;
    *) echo "FAIL: $p does not depend on libaccel$abi (= $version-1)" >&2; exit 1 ;;
  esac
done
for p in "${packages[@]}"; do
  expect_license "$p's copyright file" "$(dpkg-deb --fsys-tarfile "$work/dist/${p}_$version-1_amd64.deb" | tar -xO ./usr/share/doc/$p/copyright 2>/dev/null)"
done
# The listing is read whole: grep -q stopping early would kill dpkg-deb with SIGPIPE and fail the pipeline.
listing=$(dpkg-deb -c "$work/dist/libaccel${abi}_$version-1_amd64.deb")
grep -q "libaccel.so.$abi -> " <<<"$listing" ||
  { echo "FAIL: libaccel$abi has no libaccel.so.$abi link" >&2; exit 1; }
# Every Depends is satisfiable here (nothing is installed: --simulate).
dpkg --simulate --force-not-root -i "$work"/dist/*.deb >"$work/simulate.log" 2>&1 || {
  cat "$work/simulate.log" >&2; echo "FAIL: dpkg --simulate -i refused the packages" >&2; exit 1; }

sysroot=$work/root
for d in "$work"/dist/*.deb; do dpkg-deb -x "$d" "$sysroot"; done
usr=$sysroot/usr

# C: the root's accel.pc and CMake package.
flags=$(clean_env PKG_CONFIG_PATH="$usr/lib/pkgconfig" pkg-config --cflags --libs accel)
clean_env cc -std=c99 -Wall -Werror "$consumer/train_two_steps.c" $flags -ldl -o "$work/consumer_pc"
out=$(clean_env LD_LIBRARY_PATH="$usr/lib" "$work/consumer_pc")
echo "$out"; expect_two_steps "$out"; expect_loaded_from "$out" "$usr/lib" "$build"
clean_env cmake -S "$consumer" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$usr" >/dev/null
clean_env cmake --build "$work/cmake" >/dev/null
out=$(clean_env "$work/cmake/train_two_steps")
echo "$out"; expect_two_steps "$out"; expect_loaded_from "$out" "$usr/lib" "$build"

# Python: python3-accel's module finds libaccel1's library by its RUNPATH.
if [ "$python" = 1 ]; then
  out=$(cd "$work" && clean_env PYTHONPATH="$usr/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 "$consumer/train_two_steps.py")
  echo "$out"; expect_two_steps "$out"; expect_loaded_from "$out" "$usr/lib" "$build"
fi

# accel-tools.
clean_env "$usr/bin/accel" env >"$work/env.txt"
lib=$(clean_env ldd "$usr/bin/accel" | sed -n 's/.*libaccel\.so\.[0-9]* => \([^ ]*\).*/\1/p')
case "$(readlink -f "$lib")" in
  "$(readlink -f "$usr")"/*) echo "ok: usr/bin/accel uses $lib" ;;
  *) echo "FAIL: usr/bin/accel uses '$lib'" >&2; exit 1 ;;
esac
echo "packages.debs: passed"
