#!/usr/bin/env bash
# ZeRO-Infinity's headline on this machine (a benchmark, run by hand, not in CI): a LLaMA of about
# 1.1B parameters (TinyLlama-1.1B's shape, from --config_name, initialised as transformers does)
# trains on 2 ranks, each rank in its own memory cgroup capped at CAP_MB (default 4096), with its
# parameters' partitions and its fp32 masters and Adam moments on disk (offload_param and
# offload_optimizer "nvme", 16 bytes per parameter: ~17.6 GB that could never fit in 2 x 4 GiB) and
# activation checkpointing on. Prints, per step, the loss and the time, and for the run each
# rank's cgroup peak, the bytes the ranks read and wrote (the kernel's /proc/<pid>/io, sampled at
# the end of each rank) and the disk's limit for the same bytes (bench/aio_limit.c).
#
#   bench/infinity_llama.sh [--build build] [--dir /tmp] [--cap-mb 4096] [--steps 4]
#                           [--block 64] [--layers 22] [--jsonl FILE]
#
# Needs root (cgroups). Uses ~16 GB of disk under --dir.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$SRC/build"
DIR=/tmp
CAP_MB=4096
STEPS=4
BLOCK=64
LAYERS=22
JSONL=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$(cd "$2" && pwd)"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --cap-mb) CAP_MB="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --block) BLOCK="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --jsonl) JSONL="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bin"
# shellcheck source=scripts/memcg.sh
source "$SRC/scripts/memcg.sh"
memcg_detect || exit 1
WORK="$(mktemp -d "$DIR/zrt_infinity_XXXXXX")"
CGS=()
cleanup() {
  for cg in "${CGS[@]}"; do memcg_remove "$cg"; done
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir "$WORK/model" "$WORK/swap"
cat > "$WORK/model/config.json" <<EOF
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
 "intermediate_size": 5632, "num_hidden_layers": $LAYERS, "num_attention_heads": 32,
 "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu",
 "initializer_range": 0.02, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}
EOF
# Buffers: a layer's partition is 22M elements per rank, the embedding's and the head's 33M.
cat > "$WORK/ds.json" <<EOF
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
 "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
 "zero_optimization": {"stage": 3, "sub_group_size": 4194304,
   "stage3_prefetch_bucket_size": 0, "stage3_max_live_parameters": 0,
   "stage3_max_reuse_distance": 0,
   "offload_param": {"device": "nvme", "nvme_path": "$WORK/swap", "buffer_count": 3,
                     "buffer_size": 34000000, "max_in_cpu": 0},
   "offload_optimizer": {"device": "nvme", "nvme_path": "$WORK/swap", "buffer_count": 9,
                         "pipeline_read": true, "pipeline_write": true}},
 "aio": {"block_size": 1048576, "queue_depth": 8}}
EOF
# Each rank moves itself into its own capped group, then becomes zrt-train; at its exit a trap
# records the kernel's I/O count of the process (read_bytes / write_bytes reach the device).
cat > "$WORK/rank.sh" <<'EOF'
#!/usr/bin/env bash
rank="${OMPI_COMM_WORLD_RANK:-0}"
echo $$ > "$CG_ROOT/zrt_infinity_$PPID_TAG_rank$rank/cgroup.procs"
"$@" &
child=$!
io=""
while kill -0 "$child" 2>/dev/null; do
  io="$(cat /proc/$child/io 2>/dev/null || echo "$io")"
  sleep 1
done
wait "$child"; rc=$?
echo "$io" > "$WORK/io_rank$rank"
exit $rc
EOF
sed -i "s|\$PPID_TAG|$$|; s|\$CG_ROOT|$([[ $MEMCG_MODE == v1 ]] && echo "$MEMCG_V1" || echo "$MEMCG_V2")|; s|\$WORK|$WORK|" "$WORK/rank.sh"
for r in 0 1; do CGS+=("$(memcg_make "zrt_infinity_$$_rank$r" "$CAP_MB")"); done

echo "infinity_llama: 2 ranks, cap $CAP_MB MB each, block $BLOCK, $STEPS steps, swap in $WORK/swap"
start=$(date +%s.%N)
set +e
"$BIN/zrt-launch" --np 2 --timeout 7200 -- bash "$WORK/rank.sh" "$BIN/zrt-train" \
  --deepspeed "$WORK/ds.json" --model llama --config_name "$WORK/model" --output_dir "$WORK/out" \
  --block_size "$BLOCK" --corpus_bytes 200000 --per_device_train_batch_size 1 \
  --max_steps "$STEPS" --learning_rate 3e-4 --lr_scheduler_type constant --weight_decay 0.0 \
  --bf16 --gradient_checkpointing --logging_steps 1 --seed 7 --save_strategy no 2>&1 |
  while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done | tee "$WORK/train.log"
rc=${PIPESTATUS[0]}
set -e
wall=$(echo "$(date +%s.%N) - $start" | bc)
peaks=(); ooms=()
for cg in "${CGS[@]}"; do peaks+=("$(memcg_peak "$cg")"); ooms+=("$(memcg_oom_kills "$cg")"); done
read_b=0; write_b=0
for r in 0 1; do
  if [[ -f "$WORK/io_rank$r" ]]; then
    read_b=$((read_b + $(awk '/^read_bytes/{print $2}' "$WORK/io_rank$r")))
    write_b=$((write_b + $(awk '/^write_bytes/{print $2}' "$WORK/io_rank$r")))
  fi
done
echo "exit $rc, wall ${wall}s, cgroup peaks ${peaks[*]} MB (cap $CAP_MB), oom kills ${ooms[*]}"
echo "disk: $((read_b >> 20)) MiB read, $((write_b >> 20)) MiB written by both ranks in the run"
# The disk's limit for one step's bytes: the plain O_DIRECT loop on a file of one rank's swap.
limit="$("$BUILD/bench/aio_limit" --dir "$WORK" --bytes 1G --block-size 1M --queue-depth 8 \
  --reps 3 --json 2>/dev/null | tail -1 || true)"
echo "aio_limit (1 GiB, block 1 MiB, queue depth 8): $limit"
if [[ -n "$JSONL" ]]; then
  python3 - "$WORK/train.log" "$rc" "$wall" "${peaks[0]:-0}" "${peaks[1]:-0}" "$read_b" "$write_b" \
    "$CAP_MB" "$BLOCK" "$LAYERS" "$limit" >> "$JSONL" <<'PY'
import json, re, sys
log, rc, wall, p0, p1, rb, wb, cap, block, layers, limit = sys.argv[1:]
text = open(log).read()
losses = [float(x) for x in re.findall(r"'loss': ([0-9.e+-]+)", text)]
stamps = [float(l.split()[0]) for l in text.splitlines() if "'loss':" in l]
step_s = [round(b - a, 2) for a, b in zip(stamps, stamps[1:])]  # steps 2.. (the first records the trace)
params = re.search(r"([0-9]+) parameters", text)
print(json.dumps({"exit": int(rc), "wall_s": float(wall), "peak_mb": [int(p0), int(p1)],
                  "cap_mb": int(cap), "read_bytes": int(rb), "write_bytes": int(wb),
                  "block": int(block), "layers": int(layers),
                  "parameters": int(params.group(1)) if params else None, "losses": losses,
                  "step_seconds": step_s,
                  "limit": json.loads(limit) if limit.startswith("{") else None}))
PY
fi
exit "$rc"
