#!/usr/bin/env bash
# The Maven artifact org.accel:accel:<version>: accel-<version>.jar is the build's accel.jar with its
# native/linux-amd64/ folder made from the installed components (stripped, RUNPATH $ORIGIN): the JNI library,
# libaccel.so.<ABI>, and LIBRARIES naming libaccel so NativeLoader loads it first; accel-<version>.pom beside it.
# `mvn install:install-file -Dfile=accel-<version>.jar -DpomFile=accel-<version>.pom` puts it in a repository.
# Called by scripts/package.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
stage_components "$stage/install" java runtime
jar=$(find "$stage/install" -name accel.jar | head -n1)
jni=$(find "$stage/install" -name libaccel_java.so | head -n1)
[ -f "$jar" ] && [ -f "$jni" ] || { echo "jar: the build has no Java bindings (ACCEL_BUILD_JAVA=OFF?)" >&2; exit 1; }
native=$stage/native/native/linux-amd64
mkdir -p "$native"
cp "$jni" "$native/"
copy_libaccel "$stage/install" "$native" >"$native/LIBRARIES"
out=$ACCEL_DIST/accel-$ACCEL_VERSION.jar
cp "$jar" "$out" && chmod u+w "$out"
jar uf "$out" -C "$stage/native" native
cat >"$ACCEL_DIST/accel-$ACCEL_VERSION.pom" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>org.accel</groupId>
  <artifactId>accel</artifactId>
  <version>$ACCEL_VERSION</version>
  <packaging>jar</packaging>
  <name>accel</name>
  <description>Accelerate-style distributed training for any language, via a C ABI: the Java bindings, with the
    JNI library and libaccel for linux-amd64 inside (LibTorch 1.13, cJSON, yaml-cpp, protobuf and Open MPI are
    the system's, as Debian 12's libaccel1 lists them).</description>
  <licenses>
    <license>
      <name>Apache-2.0</name>
      <url>https://www.apache.org/licenses/LICENSE-2.0</url>
    </license>
  </licenses>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
  </properties>
</project>
POM
echo "jar: $out"
