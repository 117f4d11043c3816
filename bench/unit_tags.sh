#!/usr/bin/env bash
# What ZeRO-3's unit tags (Note [Unit tags] in zero/unit_tags.cpp) cost a training step: the same
# zero_bench run (stage 3, 2 ranks, one core each) with the tags (ZRT_UNIT_TAGS=1) and without
# (=0), alternating, ROUNDS (9) rounds each, order rotated every round. Prints each launch's median
# step time and, per model and variant, the median over launches with min and max, the ratio of
# the medians and of each round's pair, and the measured wire bytes per step. Usage:
#   bench/unit_tags.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
ROUNDS="${2:-9}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
declare -A MODELS=(
  [blocks]="--model blocks --layers 8 --width 1024"
  [gpt]="--model gpt --layers 4 --width 256 --heads 4 --context 64 --vocab 256 --batch 4"
)
for round in $(seq 1 "$ROUNDS"); do
  order=(1 0)
  (( round % 2 == 0 )) && order=(0 1)
  for model in blocks gpt; do
    for tags in "${order[@]}"; do
      # shellcheck disable=SC2086
      line="$(ZRT_UNIT_TAGS=$tags mpirun -np 2 --bind-to none --timeout 600 -x OMP_NUM_THREADS \
                -x ZRT_UNIT_TAGS "$BUILD/bench/zero_bench" --json --stage 3 --dtype bf16 \
                --warmup 3 --steps 30 ${MODELS[$model]} | grep '^{')"
      echo "{\"model\": \"$model\", \"tags\": $tags, \"round\": $round, \"run\": $line}" | tee -a "$OUT"
    done
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for model in ("blocks", "gpt"):
    med = {}
    for tags in (1, 0):
        runs = [r["run"] for r in rows if r["model"] == model and r["tags"] == tags]
        steps = [r["step_ms"] for r in runs]
        med[tags] = statistics.median(steps)
        print(f"{model:6s} tags={tags}: step {med[tags]:.2f} ms median of {len(steps)} launches "
              f"(min {min(steps):.2f}, max {max(steps):.2f}), wire "
              f"{runs[0]['wire_mib_per_step']:.1f} MiB/step, loss falls: "
              f"{all(r['loss_falls'] for r in runs)}")
    # The machine's speed drifts between rounds: each round's two launches ran back to back.
    paired = sorted(r1["run"]["step_ms"] / r0["run"]["step_ms"]
                    for r1 in rows for r0 in rows
                    if r1["model"] == r0["model"] == model and r1["round"] == r0["round"]
                    and r1["tags"] == 1 and r0["tags"] == 0)
    print(f"{model:6s} tags on / off: {med[1] / med[0]:.4f} (medians); per round "
          f"{statistics.median(paired):.4f} median, {paired[0]:.4f} to {paired[-1]:.4f}")
PY
