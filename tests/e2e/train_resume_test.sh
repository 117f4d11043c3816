#!/usr/bin/env bash
# End to end through the user-facing binaries: for ZeRO stages 1, 2 and 3, zrt-launch runs
# zrt-train on 2 ranks for 2K steps, and again for K steps plus a second job resuming from the
# checkpoint for K more. The checkpoint files of step 2K must be byte-identical: same weights,
# optimizer moments, loss scaler, LR schedule, counters, RNG and data position. Also: a log file
# gets no progress-bar frames, evaluation runs only with --do_eval, and LoRA flags outside the
# LLaMA family are refused.
set -euo pipefail
BIN="$1"      # build/bin
SRC="$2"      # source root
WORK="$(mktemp -d /tmp/zrt_e2e_XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
MODEL=(--width 32 --layers 1 --heads 2 --context 16 --corpus_bytes 20000)
ARGS=(--per_device_train_batch_size 4 --gradient_accumulation_steps 2 --learning_rate 1e-3
      --logging_steps 2 --save_steps 4 --warmup_steps 2 --seed 7)
run() {  # run OUTPUT_DIR CONFIG MAX_STEPS [extra...]
  local out="$1" cfg="$2" steps="$3"; shift 3
  "$BIN/zrt-launch" --np 2 --timeout 300 -- "$BIN/zrt-train" --deepspeed "$cfg" \
    --output_dir "$out" --max_steps "$steps" "${MODEL[@]}" "${ARGS[@]}" "$@" \
    > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
}
for stage in 1 2 3; do
  cfg="$SRC/examples/configs/zero${stage}.json"
  run "$WORK/full$stage" "$cfg" 8
  run "$WORK/split$stage" "$cfg" 4
  run "$WORK/split$stage" "$cfg" 8 --resume_from_checkpoint last
  grep -q "resumed from" "$WORK/split$stage.log" || { echo "stage $stage: no resume"; exit 1; }
  a="$WORK/full$stage/checkpoint-8/global_step8"
  b="$WORK/split$stage/checkpoint-8/global_step8"
  n=0
  for f in "$a"/*.pt; do
    cmp "$f" "$b/$(basename "$f")" || { echo "stage $stage: $(basename "$f") differs"; exit 1; }
    n=$((n + 1))
  done
  [[ $n -ge 3 ]] || { echo "stage $stage: only $n files compared"; exit 1; }
  echo "stage $stage: $n checkpoint files byte-identical after resume"
done
# Output written to a file: plain lines, no progress-bar frames; no evaluation without --do_eval,
# and one with it.
log="$WORK/full1.log"
if grep -q $'\r' "$log"; then echo "carriage-return frames in a log file"; exit 1; fi
if grep -q "eval loss" "$log"; then echo "evaluated without --do_eval"; cat "$log"; exit 1; fi
run "$WORK/eval" "$SRC/examples/configs/zero2.json" 2 --do_train --do_eval
grep -q "eval loss" "$WORK/eval.log" || { echo "no evaluation with --do_eval"; cat "$WORK/eval.log"; exit 1; }
# LoRA flags are the LLaMA family's: with the example GPT they are refused by name (usage, exit 1).
set +e
err=$("$BIN/zrt-launch" --np 1 --timeout 120 -- "$BIN/zrt-train" --deepspeed \
  "$SRC/examples/configs/zero3.json" --output_dir "$WORK/peft" --max_steps 1 "${MODEL[@]}" \
  --use_peft --lora_r 4 2>&1)
rc=$?
set -e
[[ $rc -eq 1 && "$err" == *"--use_peft with --model gpt"* ]] || {
  echo "--use_peft with --model gpt: exit $rc, expected 1 naming the flag: $err"; exit 1; }
# The LLaMA's data and tiling flags on the GPT: usage errors naming the flag.
for flag in "--packed_documents" "--tiled_loss_tokens 4" "--tiled_mlp_tokens 4"; do
  set +e
  # shellcheck disable=SC2086
  err=$("$BIN/zrt-train" --output_dir "$WORK/text_flag" --max_steps 1 "${MODEL[@]}" $flag 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 1 && "$err" == *"${flag%% *} is for --model llama"* &&
     ! -e "$WORK/text_flag" ]] || {
    echo "$flag with --model gpt: exit $rc, expected 1 naming the flag, nothing written: $err"; exit 1; }
done
# Sequence parallelism too (the flag or the config's key), and a size below 1.
for case in "2:sequence_parallel_size 2 (sequence parallelism) is for --model llama" \
            "0:--sequence_parallel_size must be at least 1, got 0"; do
  set +e
  err=$("$BIN/zrt-train" --output_dir "$WORK/sp_flag" --max_steps 1 "${MODEL[@]}" \
    --sequence_parallel_size "${case%%:*}" 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 1 && "$err" == *"${case#*:}"* && ! -e "$WORK/sp_flag" ]] || {
    echo "--sequence_parallel_size ${case%%:*}: exit $rc, expected 1 and '${case#*:}': $err"; exit 1; }
done
echo "train_resume_test: OK"
