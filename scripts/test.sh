#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test (unit and mpirun).
# .ci/run calls this script, so the README and CI cannot drift apart.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/install_deps.sh"
"$ROOT/scripts/build.sh"
# mpirun refuses to run as root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
