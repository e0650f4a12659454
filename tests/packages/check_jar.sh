#!/usr/bin/env bash
# check_jar.sh ROOT BUILD: builds the Maven artifact (scripts/package.sh jar), installs it into a local repository
# with mvn install:install-file (offline: tests/packages/maven-settings.xml mirrors Debian's /usr/share/maven-repo),
# compiles tests/packages/consumer/maven, which depends on org.accel:accel by coordinates, and runs it with the
# jar from that repository alone on the class path: two steps, libaccel extracted from the jar.
root=$1 build=$2
. "$root/tests/packages/lib.sh"
make_work
bash "$root/scripts/package.sh" --no-build --out "$work/dist" jar >"$work/package.log" 2>&1 || {
  cat "$work/package.log" >&2; exit 1; }
version=$(sed -n 's/^project(accel VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
expect_license "the pom" "$(grep -A2 "<licenses>" "$work/dist/accel-$version.pom")"
mvn=(mvn -B -q -Dstyle.color=never -s "$root/tests/packages/maven-settings.xml" -Dmaven.repo.local="$work/m2")
clean_env "${mvn[@]}" org.apache.maven.plugins:maven-install-plugin:3.1.0:install-file \
  -Dfile="$work/dist/accel-$version.jar" -DpomFile="$work/dist/accel-$version.pom" >"$work/mvn.log" 2>&1 || {
  cat "$work/mvn.log" >&2; exit 1; }
jar=$work/m2/org/accel/accel/$version/accel-$version.jar
[ -f "$jar" ] || { echo "FAIL: install-file put no $jar" >&2; exit 1; }
cp -r "$root/tests/packages/consumer/maven" "$work/consumer"
(cd "$work/consumer" && clean_env "${mvn[@]}" -Daccel.version="$version" compile) >"$work/mvn.log" 2>&1 || {
  cat "$work/mvn.log" >&2; exit 1; }
mkdir -p "$work/tmp"
out=$(cd "$work" && clean_env java -Djava.io.tmpdir="$work/tmp" -cp "$work/consumer/target/classes:$jar" TrainTwoSteps)
echo "$out"; expect_two_steps "$out"; expect_loaded_from "$out" "$work/tmp" "$build"
echo "packages.jar: passed"
