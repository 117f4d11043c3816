#!/usr/bin/env bash
# The PMPI byte counter against known calls and against Open MPI's own transport counters:
# pmpi_count_probe runs on 2 ranks under LD_PRELOAD=libzrt_pmpi_count.so and checks every counted
# function exactly; pmpi_report.py --check then compares each rank's point-to-point bytes with the
# bytes Open MPI's pml monitoring saw leave that rank for user messages. `pmpi_count_probe hosts`
# on 4 ranks checks the host split (Note [Same host or other host]): on one machine every byte is
# same-host.
# With --netns (opt-in: root, and it takes over scripts/netns_cluster.sh's emulated hosts, so it
# must not run next to multinode_e2e) the probe's rings also run on 2 emulated hosts x 2 ranks,
# where each rank must count exactly the bytes its ring steps sent to the other host.
# Usage: pmpi_count_test.sh [--netns] LIB PROBE REPORT_PY PYTHON   (exit 77: --netns without root)
set -euo pipefail
NETNS=0
if [[ "${1:-}" == --netns ]]; then
  NETNS=1
  shift
  if [[ $(id -u) -ne 0 ]] || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP: --netns needs root and iproute2's ip netns"
    exit 77
  fi
fi
LIB="$1" PROBE="$2" REPORT="$3" PYTHON="$4"
CLUSTER="$(dirname "$(readlink -f "$0")")/../../scripts/netns_cluster.sh"
TMP="$(mktemp -d)"
cleanup() {
  [[ $NETNS == 1 ]] && "$CLUSTER" down >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 2 --oversubscribe --timeout 20 \
  --mca pml_monitoring_enable 2 --mca pml_monitoring_enable_output 3 \
  --mca pml_monitoring_filename "$TMP/prof" \
  -x LD_PRELOAD="$LIB" -x ZRT_PMPI_OUT="$TMP/out.jsonl" "$PROBE"
"$PYTHON" "$REPORT" "$TMP/out.jsonl" --prof "$TMP/prof" --ranks 2 --check
# The probe's 6000 B of ring-like traffic per rank, plus rank 0's 36 B, as the file records them,
# all to the same host; so are the collectives' bytes.
"$PYTHON" - "$TMP/out.jsonl" <<'PY'
import json, sys
lines = list(map(json.loads, open(sys.argv[1])))
got = {d["rank"]: d["p2p_send_bytes"] for d in lines}
assert got == {0: 6036, 1: 6000}, got
for d in lines:
    assert d["hosts"] == 1, d
    assert d["p2p_send_bytes_same_host"] == d["p2p_send_bytes"], d
    assert d["p2p_send_bytes_other_host"] == 0 and d["coll_bytes_cross_host"] == 0, d
    assert d["coll_bytes_one_host"] == d["coll_bytes"], d
print("pmpi_count_test: ok", got, "all same-host")
PY
mpirun -np 4 --oversubscribe --timeout 20 -x LD_PRELOAD="$LIB" -x ZRT_PMPI_OUT="$TMP/hosts1.jsonl" \
  "$PROBE" hosts
"$PYTHON" "$REPORT" "$TMP/hosts1.jsonl" --ranks 4 --check >/dev/null

[[ $NETNS == 1 ]] || exit 0
# 2 hosts x 2 ranks (ranks 0, 1 on zrt-h1; 2, 3 on zrt-h2), TCP only between the hosts. The probe
# checks each rank's split itself; the expected totals over the job, from its rings (4000 B on the
# world, 3000 B on the world reversed, 2000 B on a duplicate, 700 B within each host) and its
# collectives (400 B + 32 B on the world, 80 B + 8 B within each host):
#   p2p same host  = 2 x (4000 + 2000) + 2 x 3000 + 4 x 700 = 20800 B
#   p2p other host = 2 x (4000 + 2000) + 2 x 3000            = 18000 B
#   coll one host  = 4 x (80 + 8) = 352 B, coll cross host = 4 x (400 + 32) = 1728 B
# (the file's totals also hold the probe's own collectives on the world, outside its check).
"$CLUSTER" up 2 >/dev/null
"$CLUSTER" hostfile "$TMP/hosts" 2 zrt-h1 zrt-h2
"$CLUSTER" exec zrt-h1 "$(printf '%q ' mpirun -np 4 --hostfile "$TMP/hosts" --timeout 60) \
  $("$CLUSTER" mpirun-args) $(printf '%q ' -x LD_PRELOAD="$LIB" \
  -x ZRT_PMPI_OUT="$TMP/hosts2.jsonl" "$PROBE" hosts)"
"$PYTHON" "$REPORT" "$TMP/hosts2.jsonl" --ranks 4 --check
"$PYTHON" - "$TMP/hosts2.jsonl" <<'PY'
import json, sys
lines = [d for d in map(json.loads, open(sys.argv[1])) if d["label"] == "finalize"]
keys = ("p2p_send_bytes_same_host", "p2p_send_bytes_other_host", "coll_bytes_one_host",
        "coll_bytes_cross_host")
own = 4 * (256 + 4)  # the probe's Allgather of host names and its Allreduce of the verdict
got = {k: sum(d[k] for d in lines) for k in keys}
want = {keys[0]: 20800, keys[1]: 18000, keys[2]: 352, keys[3]: 1728 + own}
assert all(d["hosts"] == 2 for d in lines), lines
assert got == want, (got, want)
print("pmpi_count_test --netns: ok", got)
PY
