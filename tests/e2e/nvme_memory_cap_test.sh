#!/usr/bin/env bash
# ZeRO-Infinity's point, under a real memory cap: zrt-train trains a bf16 GPT whose fp32 masters
# and Adam moments (12 bytes per parameter, ~730 MB) do not fit in a cgroup memory limit that its
# parameters and gradients do. With offload_optimizer.device "nvme" it trains under the cap, loss
# falling, and the cgroup's own peak stays below it; without offload the same job is killed by the
# kernel's OOM killer at the cap; and the same model at stage 3 on 2 ranks with the parameters on
# NVMe too trains under the same cap per rank (one group capped at twice it). The memory is the kernel's count (cgroup v1
# memory.max_usage_in_bytes), not ZeroRT's bookkeeping.
#
# Needs root and the cgroup v1 memory controller (or cgroup v2 with the memory controller
# delegated to the root cgroup's children); skips (exit 77) otherwise.
set -euo pipefail
BIN="$1"  # build/bin
SRC="$2"  # source root
CAP_MB="${ZRT_NVME_CAP_MB:-1100}"
WORK="$(mktemp -d /tmp/zrt_nvme_cap_XXXXXX)"
CG=""
# shellcheck source=scripts/memcg.sh
source "$SRC/scripts/memcg.sh"
cleanup() {
  memcg_remove "$CG"  # a failed run's processes are killed before the group is removed
  rm -rf "$WORK"
}
trap cleanup EXIT
memcg_detect || exit 77

# The example GPT in bf16, 5 blocks of width 1024: 63M parameters. In memory: bf16 parameters and
# gradients (~360 MB), the swap buffers (3 sub-groups of 1M elements x 3 states, 36 MB), the
# runtime and the launcher. Not in memory with NVMe offload: fp32 masters and moments (~730 MB),
# which is what takes the job without offload past the cap.
MODEL=(--model gpt --width 1024 --layers 5 --heads 8 --context 32 --corpus_bytes 20000
       --per_device_train_batch_size 4 --max_steps 4 --learning_rate 1e-4
       --lr_scheduler_type constant --weight_decay 0.01 --bf16 --logging_steps 1 --seed 5
       --save_strategy no)
config() {  # config STAGE OFFLOAD_JSON
  cat <<EOF
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
 "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
 "zero_optimization": {"stage": $1, "sub_group_size": 1048576, $2},
 "aio": {"block_size": 1048576, "queue_depth": 8}}
EOF
}
OPT_NVME='"offload_optimizer": {"device": "nvme", "nvme_path": "'"$WORK"'", "pipeline_read": true, "pipeline_write": true, "buffer_count": 9}'
config 2 "$OPT_NVME" > "$WORK/nvme.json"
config 2 '"offload_optimizer": {"device": "none"}' > "$WORK/none.json"
# ZeRO-Infinity proper: stage 3 on 2 ranks with the parameters' partitions on NVMe as well.
config 3 "$OPT_NVME"', "offload_param": {"device": "nvme", "nvme_path": "'"$WORK"'", "max_in_cpu": 0, "buffer_size": 8000000}' \
  > "$WORK/infinity.json"

# run NAME [RANKS]: zrt-train in a fresh memory cgroup capped at CAP_MB; prints its exit code,
# the cgroup's peak in MB and the OOM kills in it.
run() {
  local name="$1" ranks="${2:-1}"
  CG="$(memcg_make "zrt_nvme_cap_$$_$name" $((CAP_MB * ranks)))"  # CAP_MB per rank
  set +e
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$CG" \
    "$BIN/zrt-launch" --np "$ranks" --timeout 300 -- "$BIN/zrt-train" --deepspeed "$WORK/$name.json" \
    --output_dir "$WORK/out_$name" "${MODEL[@]}" > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  local peak oom
  peak=$(memcg_peak "$CG")
  oom=$(memcg_oom_kills "$CG")
  rmdir "$CG"; CG=""
  echo "$rc $peak ${oom:-0}"
}

# expect_trained NAME CAP WHAT: NAME's run exited 0 under CAP MB, its loss fell, and no swap folder
# is left.
expect_trained() {
  local name="$1" cap="$2" what="$3" rc peak oom losses first last leftover
  read -r rc peak oom < "$WORK/$name.result"
  echo "$what: exit $rc, cgroup peak $peak MB of $cap, oom kills $oom"
  if [[ $rc -ne 0 ]]; then cat "$WORK/$name.log"; echo "FAILED: $what did not train under the cap"; exit 1; fi
  (( peak < cap )) || { echo "FAILED: peak $peak MB not under the cap"; exit 1; }
  losses=$(grep -o "'loss': [0-9.e+-]*" "$WORK/$name.log" | awk '{print $2}')
  first=$(echo "$losses" | head -1); last=$(echo "$losses" | tail -1)
  echo "$what: loss $first -> $last"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "FAILED: loss did not fall"; cat "$WORK/$name.log"; exit 1; }
  leftover=$(find "$WORK" -maxdepth 1 -name 'zerort-*' | wc -l)
  [[ $leftover -eq 0 ]] || { echo "FAILED: $leftover swap folders left after a clean exit"; exit 1; }
}

run nvme > "$WORK/nvme.result"
expect_trained nvme "$CAP_MB" nvme
run infinity 2 > "$WORK/infinity.result"
expect_trained infinity $((2 * CAP_MB)) "infinity (stage 3, 2 ranks, parameters and optimizer on NVMe)"

run none > "$WORK/none.result"
read -r rc peak oom < "$WORK/none.result"
echo "no offload: exit $rc, cgroup peak $peak MB of $CAP_MB, oom kills $oom"
if [[ $rc -eq 0 ]]; then
  echo "FAILED: without offload the job fitted under $CAP_MB MB: the test no longer shows anything"
  exit 1
fi
[[ ${oom:-0} -ge 1 ]] || { cat "$WORK/none.log"; echo "FAILED: failed, but not by the OOM killer"; exit 1; }
echo "nvme_memory_cap_test: OK"
