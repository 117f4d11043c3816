#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test:
#  1. the main build (LibTorch 2.x from the project's venv, build/): every test, unit, mpirun,
#     end-to-end, and the peer tests that run the real DeepSpeed and transformers;
#  2. Debian's LibTorch 1.13 (build-system/): the same code built, and its unit tests run.
#     ZRT_TEST_SYSTEM_TORCH=0 leaves this part out.
# .ci/run calls this script, so the README and CI cannot drift apart. Extra arguments go to the
# main build's ctest (e.g. -L peer, -R engine).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_BUILD_DIR:-$ROOT/build}"
BUILD_SYSTEM="${ZRT_BUILD_DIR_SYSTEM:-$ROOT/build-system}"
"$ROOT/scripts/install_deps.sh"
# mpirun refuses to run as root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0

echo "== test.sh: main build (LibTorch 2.x from the venv) in $BUILD"
ZRT_BUILD_DIR="$BUILD" "$ROOT/scripts/build.sh"
(cd "$BUILD" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@") || status=$?

if [[ "${ZRT_TEST_SYSTEM_TORCH:-1}" == 1 ]]; then
  echo "== test.sh: Debian's LibTorch 1.13 in $BUILD_SYSTEM (build + unit tests)"
  ZRT_BUILD_DIR="$BUILD_SYSTEM" "$ROOT/scripts/build.sh" -DZRT_TORCH=system
  (cd "$BUILD_SYSTEM" && ctest --output-on-failure --timeout 900 -j "$(nproc)" -L unit) ||
    status=$?
fi
exit $status
