#!/usr/bin/env bash
# The PMPI byte counter against known calls and against Open MPI's own transport counters:
# pmpi_count_probe runs on 2 ranks under LD_PRELOAD=libzrt_pmpi_count.so and checks every counted
# function exactly; pmpi_report.py --check then compares each rank's point-to-point bytes with the
# bytes Open MPI's pml monitoring saw leave that rank for user messages.
# Usage: pmpi_count_test.sh LIB PROBE REPORT_PY PYTHON
set -euo pipefail
LIB="$1" PROBE="$2" REPORT="$3" PYTHON="$4"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe --timeout 20 \
  --mca pml_monitoring_enable 2 --mca pml_monitoring_enable_output 3 \
  --mca pml_monitoring_filename "$TMP/prof" \
  -x LD_PRELOAD="$LIB" -x ZRT_PMPI_OUT="$TMP/out.jsonl" "$PROBE"
"$PYTHON" "$REPORT" "$TMP/out.jsonl" --prof "$TMP/prof" --ranks 2 --check
# The probe's 6000 B of ring-like traffic per rank, plus rank 0's 36 B, as the file records them.
"$PYTHON" - "$TMP/out.jsonl" <<'PY'
import json, sys
got = {d["rank"]: d["p2p_send_bytes"] for d in map(json.loads, open(sys.argv[1]))}
assert got == {0: 6036, 1: 6000}, got
print("pmpi_count_test: ok", got)
PY
