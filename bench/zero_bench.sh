#!/usr/bin/env bash
# Runs zero_bench over stages 0–3 (+ offload, stage 3 without prefetch) at N = 1, 2, 4 ranks and
# PyTorch DDP (gloo) on the same model, printing JSON lines. Usage:
#   bench/zero_bench.sh [build-dir] [extra zero_bench flags, e.g. --layers 12 --width 2048]
# Threads: each rank gets max(1, cores / N) intra-op threads, for ZeroRT and for DDP alike.
# ZRT_PMPI=1: every ZeroRT run goes under the PMPI byte counter (bench/README.md, "Measured
# bytes") and Open MPI's pml monitoring; each JSON line gains the measured pmpi_* fields, and
# bench/pmpi/pmpi_report.py prints each rank's whole-run counts to stderr and fails the script
# unless the point-to-point bytes equal those Open MPI's transport sent. Time such runs apart.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CORES=$(nproc)
PMPI=()
if [[ "${ZRT_PMPI:-0}" == 1 ]]; then
  LIB="$BUILD/bench/pmpi/libzrt_pmpi_count.so"
  [[ -f "$LIB" ]] || { echo "ZRT_PMPI=1 needs $LIB (target zrt_pmpi_count)" >&2; exit 2; }
  PMPI_DIR="$(mktemp -d)"
  trap 'rm -rf "$PMPI_DIR"' EXIT
  PMPI=(-x LD_PRELOAD="$LIB" -x ZRT_PMPI_OUT="$PMPI_DIR/out.jsonl"
        --mca pml_monitoring_enable 2 --mca pml_monitoring_enable_output 3
        --mca pml_monitoring_filename "$PMPI_DIR/prof")
fi
for N in 1 2 4; do
  THREADS=$(( CORES / N )); [[ $THREADS -lt 1 ]] && THREADS=1
  export OMP_NUM_THREADS=$THREADS
  run() {
    mpirun -np "$N" --oversubscribe --bind-to none --timeout 900 -x OMP_NUM_THREADS \
      ${PMPI[@]+"${PMPI[@]}"} "$BUILD/bench/zero_bench" --json "$@"
    if [[ ${#PMPI[@]} -gt 0 ]]; then
      python3 "$ROOT/bench/pmpi/pmpi_report.py" "$PMPI_DIR/out.jsonl" \
        --prof "$PMPI_DIR/prof" --ranks "$N" --check >&2
      rm -f "$PMPI_DIR"/*
    fi
  }
  run --stage 0 --dtype fp32 "$@"
  for S in 0 1 2 3; do run --stage $S "$@"; done
  run --stage 1 --offload "$@"
  run --stage 2 --offload "$@"
  run --stage 3 --no-prefetch "$@"
  if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
    # N plain processes with the env:// rendezvous (Debian's torch.distributed.run launcher
    # fails under Python 3.11); rank 0 prints the JSON line.
    pids=()
    for ((r = 0; r < N; r++)); do
      OMP_NUM_THREADS=$THREADS MASTER_ADDR=127.0.0.1 MASTER_PORT=29571 RANK=$r WORLD_SIZE=$N \
        timeout 900 /usr/bin/python3 "$ROOT/bench/ddp_gloo.py" "$@" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || echo "ddp_gloo.py failed (rank exit $?)" >&2; done
  fi
done
