#!/usr/bin/env bash
# Runs every command of README.md's ```sh blocks as written, from the repository root, as a new
# user would on a built clone. scripts/test.sh is skipped (it is what runs this test). A command
# ending in "\" continues on the next line.
set -euo pipefail
ROOT="$1"
cd "$ROOT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mapfile -t commands < <(awk '
  /^```sh$/ { inside = 1; next }
  /^```/ { inside = 0; next }
  inside {
    line = $0
    sub(/[ \t]+#.*$/, "", line)          # trailing comments
    if (line ~ /^[ \t]*$/) next
    if (line ~ /\\$/) { sub(/\\$/, "", line); pending = pending line; next }
    print pending line; pending = ""
  }' README.md)
[[ ${#commands[@]} -ge 5 ]] || { echo "found only ${#commands[@]} README commands"; exit 1; }
for cmd in "${commands[@]}"; do
  if [[ "$cmd" == *scripts/test.sh* ]]; then
    echo "skip: $cmd"
    continue
  fi
  echo "run:  $cmd"
  if ! bash -c "$cmd" >/tmp/zrt_readme_cmd.log 2>&1; then
    echo "FAILED: $cmd"
    tail -20 /tmp/zrt_readme_cmd.log
    exit 1
  fi
done
# The fine-tune example logs its loss every 10 steps: in trainer_state.json and as a curve.
ft=/tmp/zrt-readme-llama3-ft
python3 -c 'import json, sys; h = json.load(open(sys.argv[1]))["log_history"]
n = sum("loss" in e for e in h); sys.exit(0 if n >= 10 else f"only {n} losses logged")' \
  "$ft/trainer_state.json"
grep -q "<polyline" "$ft/training_loss.svg" || { echo "$ft/training_loss.svg has no curve"; exit 1; }
echo "readme_test: ${#commands[@]} commands OK"
