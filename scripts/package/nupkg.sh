#!/usr/bin/env bash
# The NuGet package Accel.<version>.nupkg: the managed assembly under lib/net45/ and the native libraries (the
# SWIG glue libaccel_csharp.so, RUNPATH $ORIGIN, and libaccel.so.<ABI>) under runtimes/linux-x64/native/, packed
# by Mono's `nuget pack` (Debian's nuget). .NET loads runtimes/<rid>/native/ by itself; under Mono the folder goes
# on LD_LIBRARY_PATH or beside the program. Called by scripts/package.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
stage_components "$stage/install" csharp runtime
dll=$(find "$stage/install" -name Accel.dll | head -n1)
glue=$(find "$stage/install" -name libaccel_csharp.so | head -n1)
[ -f "$dll" ] && [ -f "$glue" ] || { echo "nupkg: the build has no C# bindings (ACCEL_BUILD_CSHARP=OFF?)" >&2; exit 1; }
pkg=$stage/pkg
mkdir -p "$pkg/lib/net45" "$pkg/runtimes/linux-x64/native"
cp "$dll" "$pkg/lib/net45/"
cp "$glue" "$pkg/runtimes/linux-x64/native/"
copy_libaccel "$stage/install" "$pkg/runtimes/linux-x64/native" >/dev/null
cat >"$pkg/Accel.nuspec" <<XML
<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://schemas.microsoft.com/packaging/2010/07/nuspec.xsd">
  <metadata>
    <id>Accel</id>
    <version>$ACCEL_VERSION</version>
    <authors>accel</authors>
    <licenseUrl>https://www.apache.org/licenses/LICENSE-2.0</licenseUrl>
    <description>Accelerate-style distributed training for any language, via a C ABI: the C# bindings, with the
      native libraries for linux-x64 (LibTorch 1.13, cJSON, yaml-cpp, protobuf and Open MPI are the system's, as
      Debian 12's libaccel1 lists them).</description>
  </metadata>
  <files>
    <file src="lib/net45/Accel.dll" target="lib/net45" />
    <file src="runtimes/linux-x64/native/*.so*" target="runtimes/linux-x64/native" />
  </files>
</package>
XML
mkdir -p "$stage/out"
(cd "$pkg" && nuget pack Accel.nuspec -OutputDirectory "$stage/out" -NonInteractive >"$stage/pack.log" 2>&1) || {
  cat "$stage/pack.log" >&2; exit 1; }
rm -f "$ACCEL_DIST"/Accel.*.nupkg
cp "$stage"/out/*.nupkg "$ACCEL_DIST/"
echo "nupkg: $(ls "$ACCEL_DIST"/Accel.*.nupkg)"
