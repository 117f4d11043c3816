#!/usr/bin/env bash
# Configures and builds ZeroRT into ${ZRT_BUILD_DIR:-build}. Extra arguments go to cmake.
# ZRT_BUILD_TARGETS="zrt-train zrt-launch" builds only those targets (default: everything).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_BUILD_DIR:-$ROOT/build}"
GENERATOR=()
if command -v ninja >/dev/null 2>&1; then GENERATOR=(-G Ninja); fi
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [[ $# -gt 0 ]]; then
  cmake -S "$ROOT" -B "$BUILD" "$@"
fi
TARGETS=()
for t in ${ZRT_BUILD_TARGETS:-}; do TARGETS+=(--target "$t"); done
cmake --build "$BUILD" --parallel "$(nproc)" "${TARGETS[@]}"
