#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/install_deps.sh"
"$ROOT/scripts/build.sh"
echo "== zrt-config resolve: the ZeRO-3 example config as a 2-rank HF-Trainer job would see it"
"$BUILD/bin/zrt-config" resolve --deepspeed "$ROOT/examples/configs/zero3.json" \
  --world_size 2 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 \
  --learning_rate 3e-4 --warmup_ratio 0.1 --max_steps 200 --bf16 true --hidden_size 512
