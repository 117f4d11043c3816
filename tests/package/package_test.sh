#!/usr/bin/env bash
# Installs ZeroRT from BUILD_DIR into a temporary prefix, builds tests/package/consumer against it
# with find_package(ZeroRT), and runs it on 2 ranks under mpirun.
set -euo pipefail
BUILD_DIR="$1"
SOURCE_DIR="$2"
WORK="$(mktemp -d /tmp/zrt_package_XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD_DIR" --prefix "$WORK/prefix" >/dev/null
test -x "$WORK/prefix/bin/zrt-config"
test -f "$WORK/prefix/include/zrt/zrt/zrt.h"
cmake -S "$SOURCE_DIR/tests/package/consumer" -B "$WORK/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" -DCMAKE_BUILD_TYPE=Release >"$WORK/configure.log" 2>&1 ||
  { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/build" >"$WORK/build.log" 2>&1 || { tail -50 "$WORK/build.log"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe --bind-to none --timeout 120 "$WORK/build/consumer"
echo "package test: OK"
