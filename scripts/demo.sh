#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job: zrt-train (a small
# GPT byte-level language model on a generated corpus) on 2 ranks with ZeRO-3 on the CPU,
# saving a checkpoint at step 60, then a second job resuming from it to step 80.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_BUILD_DIR:-$ROOT/build}"
OUT="${ZRT_DEMO_DIR:-/tmp/zrt-demo}"
"$ROOT/scripts/install_deps.sh"
# Only what the job runs (the tests are built by scripts/test.sh).
ZRT_BUILD_TARGETS="zrt-train zrt-launch" "$ROOT/scripts/build.sh"
rm -rf "$OUT"
TRAIN=("$BUILD/bin/zrt-launch" --np 2 --timeout 600 -- "$BUILD/bin/zrt-train"
       --deepspeed "$ROOT/examples/configs/zero3.json" --output_dir "$OUT"
       --per_device_train_batch_size 8 --learning_rate 3e-3 --warmup_steps 10
       --logging_steps 10 --save_steps 30 --do_train --do_eval)
echo "== job 1: ZeRO-3 on 2 ranks, 60 steps, checkpoints at 30 and 60"
"${TRAIN[@]}" --max_steps 60
echo "== job 2: resume from the last checkpoint, train to step 80"
"${TRAIN[@]}" --max_steps 80 --resume_from_checkpoint last
echo "== checkpoints and curves in $OUT"
ls "$OUT"
