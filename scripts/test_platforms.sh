#!/usr/bin/env bash
# What CI adds after the README's test command (scripts/test.sh):
#  1. Debian's LibTorch 1.13 (build-system/): the same code built, and its unit tests run.
#     ZRT_TEST_SYSTEM_TORCH=0 leaves this part out.
#  2. A short fuzzing run (build-fuzz/, clang with ASan + UBSan): scripts/fuzz.sh for
#     ZRT_TEST_FUZZ_SECONDS (default 60) on each of ZRT_TEST_FUZZ_TARGETS (default every target:
#     fuzz_config, fuzz_pt_reader, fuzz_safetensors; the last two build the checkpoint module with
#     LibTorch under ASan, about 10 minutes cold); 0 seconds leaves it out. The long campaign is
#     run by hand (docs/RELIABILITY.md).
#  3. The GPU check's rehearsal (docs/GPU_CHECK.md): scripts/gpu_check.sh --dry-run builds
#     build-gpu/ exactly as on a lent GPU machine, from .gpu/ alone, and runs the CPU half of every
#     check. ZRT_TEST_GPU_DRY_RUN=0 leaves it out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_SYSTEM="${ZRT_BUILD_DIR_SYSTEM:-$ROOT/build-system}"
"$ROOT/scripts/install_deps.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
START=$(date +%s)
phase() { echo "== test_platforms.sh [$(( $(date +%s) - START )) s]: $*"; }

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
if [[ "${ZRT_TEST_GPU_DRY_RUN:-1}" == 1 ]]; then
  phase "the GPU check's rehearsal (scripts/gpu_check.sh --dry-run) in $ROOT/build-gpu"
  "$ROOT/scripts/gpu_check.sh" --dry-run --jobs "$(nproc)" || status=$?
fi
phase "done, exit status $status"
exit $status
