#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py, docs/GPU_CHECK.md): builds ZeroRT against the machine's
# CUDA torch from what .gpu/ carries, runs the CUDA Adam kernel, the NCCL backend, ZeRO 0-3 on the
# GPU, fp16 loss scaling and a LLaMA step time, and writes gpu_check.md/.json under $OUT.
#   scripts/gpu_check.sh --prepare    here, before a device run: fill .gpu/ (carry it)
#   scripts/gpu_check.sh              on the device machine
#   scripts/gpu_check.sh --dry-run    here: the same build and the CPU half of every check
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ZRT_GPU_PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ " $* " == *" --dry-run "* || " $* " == *" --prepare "* ]] && [[ -x "$ROOT/.venv/bin/python" ]]; then
    PY="$ROOT/.venv/bin/python"
  else
    PY="$(command -v python3)"
  fi
fi
exec "$PY" "$ROOT/scripts/gpu_check.py" --python "$PY" "$@"
