#!/usr/bin/env bash
# README command 2: installs what is missing, builds and runs every test of the main build
# (LibTorch 2.x from the project's venv, build/): unit, mpirun, end-to-end, and the peer tests
# that run the real DeepSpeed, transformers and accelerate. Extra arguments go to ctest
# (e.g. -L peer, -R engine).
# .ci/run runs this, then scripts/test_platforms.sh (Debian's LibTorch 1.13 build and its unit
# tests, and the fuzzing runs), so the README's command and CI cannot drift apart.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/install_deps.sh"
# mpirun refuses to run as root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
START=$(date +%s)
# Each phase's line says how long the run has taken so far (the README's timings come from them).
phase() { echo "== test.sh [$(( $(date +%s) - START )) s]: $*"; }

phase "main build (LibTorch 2.x from the venv) in $BUILD"
ZRT_BUILD_DIR="$BUILD" "$ROOT/scripts/build.sh"
phase "main build done; its tests"
status=0
# Tests clean up after themselves, passing or failing: a zrt_* folder the suite leaves in /tmp
# fails the run (and is removed).
scratch() { find /tmp -maxdepth 1 -type d -name 'zrt_*' 2>/dev/null | sort; }
scratch_before="$(scratch)"
(cd "$BUILD" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@") || status=$?
left="$(comm -13 <(echo "$scratch_before") <(scratch) | sed '/^$/d')"
if [[ -n "$left" ]]; then
  echo "test.sh: the tests left these folders in /tmp:"
  echo "$left"
  xargs rm -rf <<< "$left"
  status=1
fi
phase "done, exit status $status"
exit $status
