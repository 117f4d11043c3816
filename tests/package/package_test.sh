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
# Only the public headers are installed (cmake/ZrtPublicHeaders.cmake), each naming the others as
# <zrt/...>: an internal header is not there, and no installed header includes a bare module name.
(cd "$WORK/prefix/include" && find . -type f | sed 's|^\./||' | sort) >"$WORK/installed.txt"
sed -n '/^set(ZRT_PUBLIC_HEADERS/,/)/p' "$SOURCE_DIR/cmake/ZrtPublicHeaders.cmake" |
  tr -d '()' | tr ' ' '\n' | grep '\.h$' | sed 's|^zrt/||; s|^|zrt/|' | sort >"$WORK/public.txt"
if ! diff -u "$WORK/public.txt" "$WORK/installed.txt"; then
  echo "package test: the installed headers are not exactly the public ones (- public, + installed)"
  exit 1
fi
test -f "$WORK/prefix/include/zrt/zrt.h"
if grep -rn '#include "' "$WORK/prefix/include" | grep -v '#include "zrt/'; then
  echo "package test: an installed header includes a header by a bare name"; exit 1
fi
# The installed package names no path of this machine's LibTorch: a user's LibTorch is found from
# Torch_DIR (here the same torch reached through another path), not from where ZeroRT was built.
torch_args=()
if grep -q '^ZRT_TORCH:STRING=venv$' "$BUILD_DIR/CMakeCache.txt"; then
  python="$(sed -n 's/^ZRT_PYTHON:FILEPATH=//p' "$BUILD_DIR/CMakeCache.txt")"
  torch_root="$("$python" -c 'import os, torch; print(os.path.realpath(os.path.dirname(torch.__file__)))')"
  if grep -rqF "$torch_root" "$WORK/prefix/lib/cmake/ZeroRT"; then
    echo "package test: the installed CMake package names this machine's LibTorch ($torch_root):"
    grep -rnF "$torch_root" "$WORK/prefix/lib/cmake/ZeroRT" | head -5
    exit 1
  fi
  ln -s "$torch_root" "$WORK/libtorch"
  # Without a hint, and no torch on PATH's python, find_package says what to pass.
  if PATH=/usr/bin:/bin cmake -S "$SOURCE_DIR/tests/package/consumer" -B "$WORK/build_none" \
       -G Ninja -DCMAKE_PREFIX_PATH="$WORK/prefix" -DZeroRT_PYTHON=/bin/false \
       >"$WORK/none.log" 2>&1; then
    echo "package test: configured with no LibTorch to be found"; exit 1
  fi
  grep -q "Pass -DTorch_DIR=<torch>/share/cmake/Torch" "$WORK/none.log" ||
    { echo "package test: no clear message without LibTorch:"; cat "$WORK/none.log"; exit 1; }
  torch_args=(-DTorch_DIR="$WORK/libtorch/share/cmake/Torch")
fi
cmake -S "$SOURCE_DIR/tests/package/consumer" -B "$WORK/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" -DCMAKE_BUILD_TYPE=Release "${torch_args[@]}" \
  >"$WORK/configure.log" 2>&1 || { cat "$WORK/configure.log"; exit 1; }
if [ ${#torch_args[@]} -gt 0 ] && ! grep -qF "$WORK/libtorch/include" "$WORK/build/build.ninja"; then
  echo "package test: the consumer was not compiled against the LibTorch Torch_DIR names"; exit 1
fi
cmake --build "$WORK/build" >"$WORK/build.log" 2>&1 || { tail -50 "$WORK/build.log"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe --bind-to none --timeout 120 "$WORK/build/consumer"
echo "package test: OK"
