#!/usr/bin/env bash
# Multi-node runs on emulated hosts (scripts/netns_cluster.sh: network namespaces on a bridge,
# TCP only, mpirun starting orted through an rsh agent), driven by zrt-launch with a hostfile:
#  1. 2 hosts × 2 ranks train ZeRO-2 and ZeRO-3 to the same losses and byte-identical checkpoint
#     files as 1 host × 4 ranks over shared memory (ZeroRT's collectives reduce in a fixed order
#     whatever the transport), and the traffic really crossed the hosts' links;
#  2. a link goes down in the middle of a step / a host is killed (every process, SIGKILL):
#     every rank exits with a named error, the job ends within a stated deadline, no process is
#     left on any host, every committed checkpoint verifies, and the job resumes from the last one
#     on 3 hosts (a different world size) with the same result as a 3-rank run on one host;
#  3. a firewall that blocks the ranks' own connections ends every rank with a named error;
#  4. ZeRO++ on 2 hosts x 2 ranks: hpZ (groups of the 2 ranks of each host) logs the losses of
#     plain ZeRO-3 and carries fewer bytes across the link; hpZ + qwZ + qgZ stays within 2% of its
#     final loss with far fewer bytes.
#   multinode_test.sh BIN_DIR SOURCE_DIR        (exit 77 = skipped: needs root and ip netns)
set -uo pipefail
BIN="$1"
SRC="$2"
CLUSTER="$SRC/scripts/netns_cluster.sh"
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: emulated hosts need root and iproute2's ip netns"; exit 77
fi
WORK="$(mktemp -d /tmp/zrt_multinode_XXXXXX)"
cleanup() {
  "$CLUSTER" down >/dev/null 2>&1
  pkill -9 -f "$WORK" 2>/dev/null
  [[ -n "${ZRT_KEEP_WORK:-}" ]] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export ZRT_LOG_LEVEL=warn
COMM_TIMEOUT=10
# From the fault to the end of the job: the ranks' comm timeout, then mpirun's daemons notice the
# lost host when TCP gives up (~13 s with the hosts' tcp_retries2=5), then the abort.
DEADLINE=$((COMM_TIMEOUT + 25))
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

"$CLUSTER" up 4 || { echo "could not create the emulated hosts"; exit 1; }
MPIRUN_ARGS="$("$CLUSTER" mpirun-args)"
MODEL=(--width 32 --layers 2 --heads 2 --context 16 --corpus_bytes 20000 --seed 3
       --per_device_train_batch_size 4 --logging_steps 1)

# on_hosts OUT HOSTFILE STAGE MAX_STEPS [extra...]: zrt-launch started on zrt-h1 (the first host
# of every hostfile here), as a user would start it on the first node.
on_hosts() {
  local out="$1" hosts="$2" stage="$3" steps="$4"; shift 4
  "$CLUSTER" exec zrt-h1 "$(printf '%q ' "$BIN/zrt-launch" -H "$hosts" --timeout 300 \
    ${LAUNCH_EXTRA:-} --launcher_args "$MPIRUN_ARGS" -- "$BIN/zrt-train" \
    --deepspeed "$(config_of "$stage")" --output_dir "$out" \
    --max_steps "$steps" "${MODEL[@]}" "$@")" >"$out.log" 2>&1
}
# config_of STAGE|FILE: an example config by stage, or a config file.
config_of() { if [[ -f "$1" ]]; then echo "$1"; else echo "$SRC/examples/configs/zero$1.json"; fi; }
# one_host OUT NP STAGE MAX_STEPS [extra...]: the same job on this machine (shared memory).
one_host() {
  local out="$1" np="$2" stage="$3" steps="$4"; shift 4
  "$BIN/zrt-launch" --np "$np" --oversubscribe --timeout 300 -- "$BIN/zrt-train" \
    --deepspeed "$SRC/examples/configs/zero$stage.json" --output_dir "$out" \
    --max_steps "$steps" "${MODEL[@]}" "$@" >"$out.log" 2>&1
}
same_files() {  # same_files DIR_A DIR_B WHAT: every .pt of A byte-identical in B
  local n=0 f
  for f in "$1"/*.pt; do
    cmp -s "$f" "$2/$(basename "$f")" || { fail "$3: $(basename "$f") differs"; return; }
    n=$((n + 1))
  done
  [[ $n -ge 3 ]] || fail "$3: only $n checkpoint files to compare in $1"
  echo "  $3: $n checkpoint files byte-identical"
}
rx_bytes() { cat "/sys/class/net/zrt-h2b/statistics/rx_bytes"; }

"$CLUSTER" hostfile "$WORK/hosts2x2" 2 zrt-h1 zrt-h2
"$CLUSTER" hostfile "$WORK/hosts4x1" 1 zrt-h1 zrt-h2 zrt-h3 zrt-h4

echo "== 2 hosts x 2 ranks = 1 host x 4 ranks"
for stage in 2 3; do
  before=$(rx_bytes)
  on_hosts "$WORK/two$stage" "$WORK/hosts2x2" "$stage" 6 --save_steps 6 ||
    { fail "stage $stage on 2 hosts: $(tail -5 "$WORK/two$stage.log")"; continue; }
  crossed=$(( $(rx_bytes) - before ))
  one_host "$WORK/one$stage" 4 "$stage" 6 --save_steps 6 ||
    { fail "stage $stage on 1 host: $(tail -5 "$WORK/one$stage.log")"; continue; }
  grep -q -- "--mca btl tcp,self" "$WORK/two$stage.log" || fail "mpirun did not get the TCP-only options"
  # zrt-h2's link carried the collectives of its two ranks: at least a few hundred kB.
  [[ $crossed -gt 300000 ]] || fail "stage $stage: only $crossed bytes crossed zrt-h2's link"
  diff <(grep "'loss'" "$WORK/one$stage.log") <(grep "'loss'" "$WORK/two$stage.log") >/dev/null ||
    fail "stage $stage: losses differ between 1x4 and 2x2"
  [[ $(grep -c "'loss'" "$WORK/two$stage.log") -eq 6 ]] || fail "stage $stage: not 6 logged losses"
  same_files "$WORK/one$stage/checkpoint-6/global_step6" "$WORK/two$stage/checkpoint-6/global_step6" \
    "stage $stage, 2x2 vs 1x4 ($crossed bytes into zrt-h2)"
  plain_crossed=$crossed
done

echo "== ZeRO++ on 2 hosts x 2 ranks"
# zeropp_config FILE JSON: examples/configs/zero3.json with JSON's keys in zero_optimization.
zeropp_config() {
  python3 -c 'import json, sys
cfg = json.load(open(sys.argv[1])); cfg["zero_optimization"].update(json.loads(sys.argv[3]))
json.dump(cfg, open(sys.argv[2], "w"))' "$SRC/examples/configs/zero3.json" "$1" "$2"
}
final_loss() { grep "'loss'" "$1" | tail -1 | sed -E "s/.*'loss': ([0-9.e+-]+).*/\1/"; }
zeropp_config "$WORK/hpz.json" '{"zero_hpz_partition_size": 2}'
zeropp_config "$WORK/zpp.json" \
  '{"zero_hpz_partition_size": 2, "zero_quantized_weights": true, "zero_quantized_gradients": true}'
for v in hpz zpp; do
  before=$(rx_bytes)
  if on_hosts "$WORK/$v" "$WORK/hosts2x2" "$WORK/$v.json" 6 --save_steps 6; then
    crossed=$(( $(rx_bytes) - before ))
    echo "  $v: $crossed bytes into zrt-h2 (plain ZeRO-3: $plain_crossed), final loss" \
      "$(final_loss "$WORK/$v.log") (plain: $(final_loss "$WORK/two3.log"))"
    [[ $crossed -lt $plain_crossed ]] || fail "$v: $crossed bytes crossed, plain $plain_crossed"
  else
    fail "$v on 2 hosts: $(tail -5 "$WORK/$v.log")"
  fi
done
diff <(grep "'loss'" "$WORK/two3.log") <(grep "'loss'" "$WORK/hpz.log") >/dev/null ||
  fail "hpZ: losses differ from plain ZeRO-3"
python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a / b - 1) > 0.02)' \
  "$(final_loss "$WORK/zpp.log")" "$(final_loss "$WORK/two3.log")" ||
  fail "hpZ + qwZ + qgZ: final loss $(final_loss "$WORK/zpp.log") not within 2% of plain"

# fault_trial NAME ACTION: a ZeRO-3 job on 2x2 with a checkpoint every 4 steps; once checkpoint-8
# is committed, ACTION hits zrt-h2. Then the guarantees of the file header.
fault_trial() {
  local name="$1" action="$2" out="$WORK/$1" logs="$WORK/$1.ranklogs"
  echo "== $name"
  ZRT_COMM_TIMEOUT=$COMM_TIMEOUT ZRT_LOG_DIR="$logs" \
    on_hosts "$out" "$WORK/hosts2x2" 3 100000 --save_steps 4 &
  local job=$! i
  for i in $(seq 600); do [[ -e "$out/checkpoint-8/latest" ]] && break; sleep 0.1; done
  [[ -e "$out/checkpoint-8/latest" ]] || { fail "$name: no checkpoint-8 after 60 s"; kill $job; return; }
  local t0; t0=$(date +%s.%N)
  case "$action" in
    link) "$CLUSTER" link zrt-h2 down ;;
    kill) "$CLUSTER" kill zrt-h2 ;;
  esac
  local waited=0
  while kill -0 $job 2>/dev/null && [[ $waited -lt $((DEADLINE * 10 + 300)) ]]; do
    sleep 0.1; waited=$((waited + 1))
  done
  local elapsed; elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
  if kill -0 $job 2>/dev/null; then
    fail "$name: the job still runs $elapsed s after the fault"
    kill -9 $job
  fi
  wait $job; local rc=$?
  echo "  job ended with exit $rc, $elapsed s after the fault (deadline $DEADLINE s)"
  [[ $rc -ne 0 ]] || fail "$name: the job exited 0"
  (( $(echo "$elapsed <= $DEADLINE" | bc) )) || fail "$name: ended after $elapsed s > $DEADLINE s"
  # Every rank's last words, from its own host's log file.
  local r named=0
  for r in 0 1 2 3; do
    local f; f=$(ls "$logs"/*.rank$r.log 2>/dev/null | head -1)
    if [[ -n "$f" ]] && grep -q "communication timeout" "$f"; then named=$((named + 1)); fi
  done
  echo "  $named of 4 ranks logged a named communication timeout"
  if [[ "$action" == link ]]; then
    [[ $named -eq 4 ]] || fail "$name: $named of 4 ranks named the timeout: $(cat "$logs"/* 2>/dev/null)"
  else
    # The killed host's ranks die without a word. Its kernel closes their sockets and the
    # daemon's, so either mpirun ("ORTE has lost communication with a remote daemon ... on node
    # zrt-h2") or the survivors' Open MPI ("peer process has unexpectedly disconnected ... Peer
    # host: zrt-h2") ends the job at once, naming the host; whichever notices first. When mpirun
    # sees its rsh agent die first, it says "ORTE was unable to reliably start one or more
    # daemons" without the host (an ssh client would outlive its remote host; ours does not).
    local said
    said=$(grep -m1 -E "Remote daemon: .* on node zrt-h2|Peer host: *zrt-h2|ORTE was unable to reliably start" "$out.log")
    if [[ -n "$said" ]]; then
      echo "  Open MPI ends the job: ${said//  / }"
    elif [[ $named -lt 2 ]]; then
      fail "$name: neither a named timeout nor Open MPI naming the lost host: $(tail -20 "$out.log")"
    fi
  fi
  sleep 1
  local h
  for h in zrt-h1 zrt-h2 zrt-h3 zrt-h4; do
    [[ -z "$(ip netns pids "$h")" ]] || fail "$name: processes left on $h: $(ip netns pids "$h" | xargs ps -o pid=,args= -p)"
  done
  pgrep -f "$out" >/dev/null && fail "$name: processes left: $(pgrep -af "$out")"
  local d verified=0
  for d in "$out"/checkpoint-*; do
    [[ -f "$d/latest" ]] || continue
    "$BIN/zrt-ckpt" verify "$d" >"$out.verify" 2>&1 || fail "$name: $d does not verify: $(head -3 "$out.verify")"
    verified=$((verified + 1))
  done
  echo "  $verified committed checkpoint(s) verify"
  [[ "$action" == link ]] && "$CLUSTER" link zrt-h2 up
  # Resume on 3 hosts (--exclude drops the failed zrt-h2 from the 4-host hostfile) and, for
  # reference, on 3 ranks of one host, from a copy.
  local last; last=$(ls -d "$out"/checkpoint-* | sort -t- -k2 -n | tail -1)
  local step=${last##*-} to=$(( ${last##*-} + 4 ))
  mkdir -p "$out.ref" && cp -r "$last" "$out.ref/"
  mv "$out.log" "$out.fault.log"
  LAUNCH_EXTRA="--exclude zrt-h2" \
    on_hosts "$out" "$WORK/hosts4x1" 3 $to --save_steps 4 --resume_from_checkpoint last ||
    { fail "$name: resume on 3 hosts failed: $(tail -5 "$out.log")"; return; }
  one_host "$out.ref" 3 3 $to --save_steps 4 --resume_from_checkpoint last ||
    { fail "$name: reference resume failed: $(tail -5 "$out.ref.log")"; return; }
  grep -q "3 rank(s) on 3 node(s): zrt-h1:0 zrt-h3:0 zrt-h4:0" "$out.log" ||
    fail "$name: --exclude zrt-h2 did not give zrt-h1, zrt-h3, zrt-h4: $(grep 'rank(s) on' "$out.log")"
  grep -q "train: 4 steps ($((step + 1)) to $to)" "$out.log" ||
    fail "$name: the 3-host job did not resume at step $((step + 1)): $(grep '^train' "$out.log")"
  same_files "$out.ref/checkpoint-$to/global_step$to" "$out/checkpoint-$to/global_step$to" \
    "resumed at step $step on 3 hosts = on 3 ranks of one host"
}
fault_trial link_down link
fault_trial host_killed kill

# A firewall that lets mpirun's daemons in (a fixed port) but not the ranks' own connections: the
# communicator's set-up blocks in MPI; its deadline must end every rank with a named error.
echo "== firewall between the ranks"
fw="--mca oob_tcp_static_ipv4_ports 30000"
ip netns exec zrt-h1 iptables -w -A INPUT -p tcp --syn -s 10.213.0.12 ! --dport 30000 -j DROP
ip netns exec zrt-h2 iptables -w -A INPUT -p tcp --syn -s 10.213.0.11 -j DROP
t0=$(date +%s.%N)
MPIRUN_ARGS="$MPIRUN_ARGS $fw" ZRT_COMM_TIMEOUT=$COMM_TIMEOUT ZRT_LOG_DIR="$WORK/fw.ranklogs" \
  on_hosts "$WORK/fw" "$WORK/hosts2x2" 2 4
rc=$?
elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
ip netns exec zrt-h1 iptables -w -F INPUT
ip netns exec zrt-h2 iptables -w -F INPUT
echo "  job ended with exit $rc after $elapsed s (deadline $((COMM_TIMEOUT + 10)) s)"
[[ $rc -ne 0 ]] || fail "firewall: the job exited 0"
(( $(echo "$elapsed <= $COMM_TIMEOUT + 10" | bc) )) || fail "firewall: ended after $elapsed s"
named=$(grep -l "setting up the MPI communicator" "$WORK/fw.ranklogs"/*.log 2>/dev/null | wc -l)
echo "  $named of 4 ranks named the set-up timeout"
[[ $named -eq 4 ]] || fail "firewall: $named of 4 ranks named it: $(tail -5 "$WORK/fw.log")"
for h in zrt-h1 zrt-h2; do
  [[ -z "$(ip netns pids "$h")" ]] || fail "firewall: processes left on $h"
done

"$CLUSTER" down || fail "netns_cluster down failed"
[[ -z "$(ip netns list | grep zrt-h)" ]] || fail "namespaces left behind"
echo "multinode: $FAILS failure(s)"
[[ $FAILS -eq 0 ]]
