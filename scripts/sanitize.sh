#!/usr/bin/env bash
# The pre-release sanitizer check: builds the unit tests, the MPI tests and the tools with
# AddressSanitizer + UndefinedBehaviorSanitizer (gcc) into a separate build dir and runs every unit
# test, the 2-rank mpirun tests and the bad-input corpus (which runs zrt-ckpt and zrt-config, so
# LeakSanitizer checks the tools too). Any sanitizer report fails the run.
#
#   scripts/sanitize.sh [extra ctest arguments, e.g. -R config_test]
#
# Leak reports from inside LibTorch, OpenMPI and the C++ runtime's once-per-process allocations
# are suppressed by scripts/lsan_suppressions.txt (each entry says why); leaks in ZeroRT code are
# not. UBSan reports abort the test (halt_on_error). Takes long on 2 cores (see
# docs/RELIABILITY.md, "Sanitizers"), so CI runs the plain build only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_ASAN_BUILD_DIR:-$ROOT/build-asan}"
JOBS="${ZRT_ASAN_JOBS:-2}"

FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
# Open MPI unloads its plugins (mca_*.so) in MPI_Finalize, so LeakSanitizer's stacks of their
# once-per-process allocations end in "<unknown module>" and no suppression could name them.
# Every executable of this build carries a dlclose() that does nothing (exported, so it takes
# precedence over libc's for Open MPI's calls): the plugins stay loaded and their frames named.
mkdir -p "$BUILD"
cc -c -fPIC -O2 -o "$BUILD/no_dlclose.o" -x c - <<'EOF'
int dlclose(void* handle) { (void)handle; return 0; }
EOF
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined $BUILD/no_dlclose.o -Wl,--export-dynamic-symbol=dlclose" \
  -DZRT_WITH_CUDA=OFF -DZRT_WITH_NCCL=OFF >/dev/null
TARGETS=(core_test aio_test text_test local_comm_test sched_test optim_math_test zero_test config_test
         optim_test kernels_test checkpoint_test launch_test tools_test zrt-ckpt zrt-config zrt-train
         zrt-launch)
if ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q '^engine_test:'; then
  TARGETS+=(mpi_comm_test nccl_comm_test engine_test comm_fault_test comm_fault_prog)
fi
start=$(date +%s)
cmake --build "$BUILD" --parallel "$JOBS" --target "${TARGETS[@]}"
echo "sanitize: build took $(( $(date +%s) - start )) s"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:strict_init_order=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan_suppressions.txt:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# OpenMPI's shared-memory transport maps segments that ASan's shadow does not expect; TCP and
# self are enough for 2 ranks on one host.
export OMPI_MCA_btl="self,tcp"
cd "$BUILD"
start=$(date +%s)
status=0
ctest --output-on-failure --timeout 1800 -L unit "$@" || status=$?
ctest --output-on-failure --timeout 1800 -R '\.np2$' "$@" || status=$?
echo "sanitize: tests took $(( $(date +%s) - start )) s, exit status $status"
exit $status
