#!/usr/bin/env bash
# check_nupkg.sh ROOT BUILD: builds the NuGet package (scripts/package.sh nupkg), puts it in a local feed (a folder),
# restores it with `nuget install Accel -Version <version> -Source <feed>` (offline), compiles
# tests/packages/consumer/csharp against the restored lib/net45/Accel.dll and runs it under Mono with the
# package's runtimes/linux-x64/native/ as its native folder: two steps, libaccel from the restored package.
root=$1 build=$2
. "$root/tests/packages/lib.sh"
make_work
bash "$root/scripts/package.sh" --no-build --out "$work/feed" nupkg >"$work/package.log" 2>&1 || {
  cat "$work/package.log" >&2; exit 1; }
version=$(sed -n 's/^project(accel VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[ -f "$work/feed/Accel.$version.nupkg" ] || { echo "FAIL: no Accel.$version.nupkg in the feed" >&2; exit 1; }
expect_license "the nuspec" "$(unzip -p "$work/feed/Accel.$version.nupkg" Accel.nuspec | grep "<license")"
clean_env HOME="$work/home" nuget install Accel -Version "$version" -Source "$work/feed" \
  -OutputDirectory "$work/packages" -NonInteractive >"$work/nuget.log" 2>&1 || { cat "$work/nuget.log" >&2; exit 1; }
restored=$work/packages/Accel.$version
native=$restored/runtimes/linux-x64/native
for f in lib/net45/Accel.dll runtimes/linux-x64/native/libaccel_csharp.so; do
  [ -f "$restored/$f" ] || { echo "FAIL: the restored package has no $f" >&2; exit 1; }
done
mkdir -p "$work/app"
cp "$restored/lib/net45/Accel.dll" "$work/app/"
clean_env mcs -nologo -out:"$work/app/TrainTwoSteps.exe" -r:"$work/app/Accel.dll" \
  "$root/tests/packages/consumer/csharp/TrainTwoSteps.cs"
out=$(cd "$work" && clean_env LD_LIBRARY_PATH="$native" mono "$work/app/TrainTwoSteps.exe")
echo "$out"; expect_two_steps "$out"; expect_loaded_from "$out" "$native" "$build"
echo "packages.nupkg: passed"
