#!/usr/bin/env bash
# The fault campaign of docs/RELIABILITY.md. Each trial runs zrt-train on 2 ranks (ZeRO-2 or
# ZeRO-3, a checkpoint every 2 steps) and kills one rank with SIGKILL — at a random moment, at a
# random file-system operation of a checkpoint save (ZRT_FAULT_INJECT=kill_in_save), or in a
# random step (kill_at_step) — then checks:
#   * the job exits non-zero within the communication deadline, and no rank is left running;
#   * every checkpoint-N whose `latest` exists passes `zrt-ckpt verify`;
#   * resuming from the last complete checkpoint and training to the end gives files
#     byte-identical to an uninterrupted run.
# Then one trial each of: a stalled rank (SIGSTOP: the others report the timeout naming the op),
# a full disk (a 1.5 MiB tmpfs; needs root) and an unwritable output directory: a clear error,
# earlier checkpoints untouched. A trial whose fault did not happen (the job finished first, the
# victim was not found, the tmpfs could not be mounted) is a failure, not a pass.
#
#   scripts/fault_campaign.sh [TRIALS] [BUILD_DIR]     (CI runs 3 trials; the full campaign 21)
set -uo pipefail
TRIALS="${1:-21}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${2:-$ROOT/build}"
BIN="$BUILD/bin"
WORK="$(mktemp -d /tmp/zrt_faults_XXXXXX)"
trap 'rm -rf "$WORK"; umount "$WORK/tiny" 2>/dev/null' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export ZRT_COMM_TIMEOUT=20 ZRT_LOG_LEVEL=warn
STEPS=24
DEADLINE=45  # seconds from the kill to the end of the job (comm timeout + abort + margin)
FAIL=0
fail() { echo "FAIL: $*"; FAIL=$((FAIL + 1)); }

# train OUT STAGE STEPS [extra...]: a small zrt-train job on 2 ranks (a script, so that it can
# also run in the background with an injected fault in its environment).
cat >"$WORK/train.sh" <<EOS
#!/usr/bin/env bash
out="\$1" stage="\$2" steps="\$3"; shift 3
exec "$BIN/zrt-launch" --np 2 --timeout 300 -- "$BIN/zrt-train" \\
  --deepspeed "$ROOT/examples/configs/zero\${stage}.json" --output_dir "\$out" \\
  --max_steps "\$steps" --save_steps 2 --logging_steps 100 --per_device_train_batch_size 4 \\
  --width 32 --layers 1 --heads 2 --context 16 --corpus_bytes 20000 --seed 3 "\$@"
EOS
chmod +x "$WORK/train.sh"
train() { "$WORK/train.sh" "$@"; }

verify_all() {  # every checkpoint-N with a `latest` must verify
  local out="$1" ok=0
  for d in "$out"/checkpoint-*; do
    [[ -f "$d/latest" ]] || continue
    if ! "$BIN/zrt-ckpt" verify "$d" >"$WORK/verify.log" 2>&1; then
      fail "$d: latest names an incomplete checkpoint: $(head -3 "$WORK/verify.log")"
    fi
    ok=$((ok + 1))
  done
  echo "  $ok checkpoint(s) verified"
}

same_as_reference() {  # resume to STEPS and compare with the uninterrupted run
  local out="$1" stage="$2" resume=()
  # Resume when some checkpoint is complete; otherwise (killed during the first save) start over,
  # as `--resume_from_checkpoint last` rightly refuses a directory without a valid checkpoint.
  ls "$out"/checkpoint-*/latest >/dev/null 2>&1 && resume=(--resume_from_checkpoint last)
  if ! train "$out" "$stage" "$STEPS" "${resume[@]}" >"$out.resume.log" 2>&1; then
    fail "resume of $out failed: $(tail -3 "$out.resume.log")"
    return
  fi
  for f in "$WORK/ref$stage/checkpoint-$STEPS/global_step$STEPS"/*.pt; do
    cmp -s "$f" "$out/checkpoint-$STEPS/global_step$STEPS/$(basename "$f")" ||
      fail "$out: $(basename "$f") differs from the uninterrupted run"
  done
}

# wait_for FILE: until FILE exists (the job has made progress), at most 60 s.
wait_for() {
  local i
  for i in $(seq 600); do [[ -e "$1" ]] && return 0; sleep 0.1; done
  return 1
}

for stage in 2 3; do
  train "$WORK/ref$stage" "$stage" "$STEPS" >"$WORK/ref$stage.log" 2>&1 ||
    { echo "reference run failed"; cat "$WORK/ref$stage.log"; exit 1; }
done

for trial in $(seq 1 "$TRIALS"); do
  RANDOM=$((trial * 7919))
  stage=$((2 + trial % 2))
  kind=$(((trial - 1) % 3))
  rank=$(((trial - 1) / 3 % 2))  # trials 1-3 kill rank 0, 4-6 rank 1, ...
  out="$WORK/t$trial"
  case $kind in
    0) what="SIGKILL of rank $rank after a random delay"; env=() ;;
    1) op=$((1 + RANDOM % 40)); what="SIGKILL of rank $rank at save operation $op"
       env=(env "ZRT_FAULT_INJECT=kill_in_save:rank=$rank:op=$op") ;;
    2) step=$((2 + RANDOM % (STEPS - 3))); what="SIGKILL of rank $rank in step $step"
       env=(env "ZRT_FAULT_INJECT=kill_at_step:rank=$rank:step=$step") ;;
  esac
  echo "trial $trial (ZeRO-$stage): $what"
  start=$(date +%s.%N)
  "${env[@]}" "$WORK/train.sh" "$out" "$stage" "$STEPS" >"$out.log" 2>&1 &
  job=$!
  if [[ $kind -eq 0 ]]; then
    # A random point in the job, paced by its progress so that the kill lands inside the job
    # on fast and slow machines: soon after a random checkpoint appeared (a random 0-99 ms later).
    target="$out/checkpoint-$((2 * (1 + RANDOM % (STEPS / 2 - 3))))/latest"
    wait_for "$target" || fail "trial $trial: $target never appeared (the job made no progress)"
    sleep "0.0$((RANDOM % 10))"
    victim=$(pgrep -f "^$BIN/zrt-train .*--output_dir $out " | sed -n "$((rank + 1))p")
    if [[ -n "$victim" ]]; then
      kill -9 "$victim"
    else
      fail "trial $trial: rank $rank's process was not found: the fault did not happen"
    fi
    start=$(date +%s.%N)
  fi
  wait $job
  rc=$?
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if grep -q "train: $STEPS steps" "$out.log"; then
    # A trial whose fault did not happen tested nothing: that is a failure of the trial.
    fail "trial $trial: the job finished (rc=$rc): the fault never fired"
  else
    [[ $rc -ne 0 ]] || fail "trial $trial: the job exited 0 after a rank was killed"
    awk -v e="$elapsed" -v d="$DEADLINE" 'BEGIN { exit !(e <= d) }' ||
      fail "trial $trial: the job took ${elapsed}s to end (deadline ${DEADLINE}s)"
    echo "  job ended with exit code $rc after ${elapsed}s"
  fi
  sleep 1
  pgrep -f "output_dir $out " >/dev/null && fail "trial $trial: processes left behind"
  verify_all "$out"
  same_as_reference "$out" "$stage"
done

echo "stall: SIGSTOP of rank 1 — the other rank must report the timeout naming the op"
out="$WORK/stall"
ZRT_COMM_TIMEOUT=5 train "$out" 2 2000 >"$out.log" 2>&1 &
job=$!
wait_for "$out/checkpoint-2/latest" || fail "stall: the job made no progress"
victim=$(pgrep -f "^$BIN/zrt-train .*--output_dir $out " | sed -n 2p)
[[ -n "$victim" ]] || fail "stall: rank 1's process was not found: the fault did not happen"
kill -STOP "$victim" 2>/dev/null
start=$(date +%s)
wait $job
rc=$?
elapsed=$(($(date +%s) - start))
[[ $rc -ne 0 ]] || fail "stall: exit code 0"
[[ $elapsed -le 30 ]] || fail "stall: took ${elapsed}s"
grep -q "communication timeout: .*#" "$out.log" || fail "stall: no timeout message naming the op"
grep -m1 "communication timeout" "$out.log" | sed 's/^/  /'
sleep 1
pgrep -f "output_dir $out " >/dev/null && { fail "stall: processes left"; pkill -9 -f "output_dir $out "; }

echo "disk full: checkpoints into a 1.5 MiB tmpfs"
mkdir -p "$WORK/tiny"
if mount -t tmpfs -o size=1536k tmpfs "$WORK/tiny" 2>/dev/null; then
  out="$WORK/tiny/run"
  train "$out" 2 20 >"$WORK/full.log" 2>&1
  rc=$?
  [[ $rc -eq 3 ]] || fail "disk full: exit code $rc, expected 3 (checkpoint error)"
  grep -q "No space left on device" "$WORK/full.log" || fail "disk full: no clear error"
  grep -m1 "No space" "$WORK/full.log" | sed 's/^/  /'
  verify_all "$out"
  umount "$WORK/tiny"
else
  fail "disk full: mounting a tmpfs is not allowed here (the trial needs root): not run"
fi

echo "unwritable output: checkpoint-4 is a file, not a directory"
out="$WORK/blocked"
mkdir -p "$out" && touch "$out/checkpoint-4"
train "$out" 2 8 >"$WORK/blocked.log" 2>&1
rc=$?
[[ $rc -eq 3 ]] || fail "unwritable: exit code $rc, expected 3"
verify_all "$out"
[[ -f "$out/checkpoint-2/latest" ]] || fail "unwritable: checkpoint-2 was damaged"
grep -m1 "error" "$WORK/blocked.log" | sed 's/^/  /'

echo "fault campaign: $TRIALS kill trials + stall + disk full + unwritable, $FAIL failure(s)"
exit $((FAIL > 0))
