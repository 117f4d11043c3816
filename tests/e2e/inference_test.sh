#!/usr/bin/env bash
# Issue 19 end to end: a 2-rank ZeRO-2 training checkpoint serves prediction through zrt-train.
#  - the README's command (--do_predict --resume_from_checkpoint on the zero3_inference config)
#    runs: module weights only, no optimizer or scheduler files read;
#  - ZeRO-3 inference on 1, 2 and 3 ranks from --model_name_or_path (the checkpoint folder, the
#    tag folder, the consolidated .safetensors of zrt-ckpt to-fp32) and a single-process stage-0
#    forward of the consolidated weights write byte-identical predictions (one example per
#    forward everywhere, so every prediction is the same computation on the same fp32 weights);
#  - predictions.safetensors, predict_results.json and all_results.json are where HF writes them.
set -euo pipefail
BIN="$1"  # build/bin
SRC="$2"  # source root
WORK="$(mktemp -d /tmp/zrt_infer_XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
MODEL=(--width 32 --layers 2 --heads 2 --context 16 --corpus_bytes 20000)
launch() {  # launch NP LOG zrt-train-args...
  local np="$1" log="$2"; shift 2
  "$BIN/zrt-launch" --np "$np" --timeout 300 -- "$BIN/zrt-train" "${MODEL[@]}" "$@" \
    > "$log" 2>&1 || { cat "$log"; echo "FAILED: zrt-train $*"; exit 1; }
}
launch 2 "$WORK/train.log" --deepspeed "$SRC/examples/configs/zero2.json" \
  --output_dir "$WORK/run" --max_steps 6 --save_steps 6 --logging_steps 3 \
  --per_device_train_batch_size 4 --learning_rate 3e-3
CKPT="$WORK/run/checkpoint-6"
[[ -f "$CKPT/latest" ]] || { echo "no checkpoint"; exit 1; }
"$BIN/zrt-ckpt" to-fp32 "$CKPT" "$WORK/fp32.safetensors" > /dev/null

INFER=(--deepspeed "$SRC/examples/configs/zero3_inference.json" --do_predict
       --per_device_eval_batch_size 1)
launch 2 "$WORK/issue.log" "${INFER[@]}" --output_dir "$WORK/issue" --resume_from_checkpoint "$CKPT"
grep -q "loaded the module weights of checkpoint" "$WORK/issue.log" || {
  cat "$WORK/issue.log"; echo "the weights were not loaded"; exit 1; }
for f in predictions.safetensors predict_results.json all_results.json; do
  [[ -s "$WORK/issue/$f" ]] || { echo "no $f in output_dir"; exit 1; }
done
grep -q '"predict_loss"' "$WORK/issue/predict_results.json" || { echo "no predict_loss"; exit 1; }
grep -q "predict_samples" "$WORK/issue.log" || { echo "no metrics printed"; exit 1; }

launch 1 "$WORK/np1.log" "${INFER[@]}" --output_dir "$WORK/np1" --model_name_or_path "$CKPT"
launch 3 "$WORK/np3.log" "${INFER[@]}" --output_dir "$WORK/np3" \
  --model_name_or_path "$CKPT/global_step6"
launch 2 "$WORK/fp32.log" "${INFER[@]}" --output_dir "$WORK/fp32" \
  --model_name_or_path "$WORK/fp32.safetensors"
launch 1 "$WORK/plain.log" --deepspeed "$SRC/examples/configs/zero0.json" --do_predict \
  --per_device_eval_batch_size 1 --output_dir "$WORK/plain" \
  --model_name_or_path "$WORK/fp32.safetensors"
ref="$WORK/plain/predictions.safetensors"
for run in issue np1 np3 fp32; do
  cmp "$ref" "$WORK/$run/predictions.safetensors" || {
    echo "predictions of '$run' differ from the single-process forward"; exit 1; }
  echo "inference_test: $run: predictions byte-identical to the single-process forward"
done
# Training from weights on purpose: the step counter starts again at 0.
launch 2 "$WORK/tune.log" --deepspeed "$SRC/examples/configs/zero2.json" --do_train \
  --output_dir "$WORK/tune" --max_steps 2 --model_name_or_path "$CKPT"
grep -q "train: 2 steps (1 to 2)" "$WORK/tune.log" || { cat "$WORK/tune.log"; exit 1; }
echo "inference_test: OK"
