#!/usr/bin/env bash
# check_install.sh BUILD_DIR CONSUMER_DIR WORK_DIR
set -euo pipefail
build=$1 consumer=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(dirname "$(find "$prefix" -name accel.pc | head -n1)")
libdir=$(dirname "$pc")

# 1. pkg-config, as a Makefile or another build system would use it.
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs accel)
echo "pkg-config --cflags --libs accel: $flags"
cc -std=c99 -Wall -Werror "$consumer/consumer.c" $flags -o "$work/consumer_pc"
LD_LIBRARY_PATH="$libdir" "$work/consumer_pc"

# 2. find_package(accel) from a separate CMake project.
cmake -S "$consumer" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$libdir" "$work/cmake/consumer"
echo "install: 2 consumers passed, 0 failed"
