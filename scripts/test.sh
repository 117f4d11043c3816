#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test:
#  1. the main build (LibTorch 2.x from the project's venv, build/): every test, unit, mpirun,
#     end-to-end, and the peer tests that run the real DeepSpeed and transformers;
#  2. Debian's LibTorch 1.13 (build-system/): the same code built, and its unit tests run.
#     ZRT_TEST_SYSTEM_TORCH=0 leaves this part out.
#  3. A short fuzzing run (build-fuzz/, clang with ASan + UBSan): scripts/fuzz.sh for
#     ZRT_TEST_FUZZ_SECONDS (default 60) on each of ZRT_TEST_FUZZ_TARGETS (default every target:
#     fuzz_config, fuzz_pt_reader, fuzz_safetensors; the last two build the checkpoint module with
#     LibTorch under ASan, about 10 minutes cold); 0 seconds leaves it out. The long campaign is
#     run by hand (docs/RELIABILITY.md).
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
START=$(date +%s)
# Each phase's line says how long the run has taken so far (the README's timings come from them).
phase() { echo "== test.sh [$(( $(date +%s) - START )) s]: $*"; }

phase "main build (LibTorch 2.x from the venv) in $BUILD"
ZRT_BUILD_DIR="$BUILD" "$ROOT/scripts/build.sh"
phase "main build done; its tests"
(cd "$BUILD" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@") || status=$?

if [[ "${ZRT_TEST_SYSTEM_TORCH:-1}" == 1 ]]; then
  phase "Debian's LibTorch 1.13 in $BUILD_SYSTEM (build + unit tests)"
  # Only the unit tests run here: the mpirun test binaries are not built (ZRT_BUILD_MPI_TESTS).
  ZRT_BUILD_DIR="$BUILD_SYSTEM" "$ROOT/scripts/build.sh" -DZRT_TORCH=system -DZRT_BUILD_MPI_TESTS=OFF
  phase "1.13 build done; its unit tests"
  (cd "$BUILD_SYSTEM" && ctest --output-on-failure --timeout 900 -j "$(nproc)" -L unit) ||
    status=$?
fi

FUZZ_SECONDS="${ZRT_TEST_FUZZ_SECONDS:-60}"
if [[ "$FUZZ_SECONDS" != 0 ]]; then
  phase "fuzzing, $FUZZ_SECONDS s per target (clang, ASan + UBSan) in $ROOT/build-fuzz"
  # shellcheck disable=SC2086  # a list of target names
  ZRT_FUZZ_BUILD_DIR="$ROOT/build-fuzz" "$ROOT/scripts/fuzz.sh" "$FUZZ_SECONDS" \
    ${ZRT_TEST_FUZZ_TARGETS:-} || status=$?
fi
phase "done, exit status $status"
exit $status
