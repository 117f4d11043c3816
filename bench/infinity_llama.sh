#!/usr/bin/env bash
# ZeRO-Infinity's headline on this machine (a benchmark, run by hand, not in CI): a LLaMA of about
# 1.1B parameters (TinyLlama-1.1B's shape, from --config_name, initialised as transformers does)
# trains on 2 ranks, each rank in its own memory cgroup capped at CAP_MB (default 4096), with its
# parameters' partitions and its fp32 masters and Adam moments on disk (offload_param and
# offload_optimizer "nvme", 16 bytes per parameter: ~17.6 GB that could never fit in 2 x 4 GiB) and
# activation checkpointing on. The run saves a DeepSpeed-layout checkpoint at its last step, and a
# second launch resumes from it for two more steps, under the same caps. Prints, per step, the
# loss, the time and the bytes the ranks read and wrote (the kernel's /proc/<pid>/io, sampled twice
# a second) next to the time the disk's limit (bench/aio_limit.c) needs for them, and per launch
# each rank's cgroup peak, OOM kills and peak RSS.
#
#   bench/infinity_llama.sh [--build build] [--dir /tmp] [--cap-mb 4096] [--steps 4]
#                           [--block 64] [--layers 22] [--jsonl FILE] [--log FILE]
#
# The training log is kept in --log (default
# DIR/infinity_llama.log); --jsonl appends one JSON line with, for each launch ("train", "resume"),
# per step (from the second) its time, the bytes both ranks read and wrote and the time those bytes
# take at the disk's limit; the cgroup peaks (page cache included), OOM kills, per rank peak RSS
# (VmHWM: file-backed pages included, e.g. the swap files mapped while a checkpoint is written)
# and peak anonymous RSS (sampled), the losses and rank 0's checkpoint save.
#
# Needs root (cgroups). Uses ~35 GB of disk under --dir (swap files, checkpoint, model).
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$SRC/build"
DIR=/tmp
CAP_MB=4096
STEPS=4
BLOCK=64
LAYERS=22
JSONL=""
LOG=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$(cd "$2" && pwd)"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --cap-mb) CAP_MB="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --block) BLOCK="$2"; shift 2 ;;
    --layers) LAYERS="$2"; shift 2 ;;
    --jsonl) JSONL="$2"; shift 2 ;;
    --log) LOG="$2"; shift 2 ;;
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
# Buffers: a layer's partition is 22M elements per rank, the embedding's and the head's 33M. The
# gradients that reductions in flight may hold (reduce_bucket_size, DeepSpeed's 5e8 by default:
# 1 GB of bf16 here) are bounded to 5e7 elements.
cat > "$WORK/ds.json" <<EOF
{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
 "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
 "zero_optimization": {"stage": 3, "sub_group_size": 4194304, "reduce_bucket_size": 50000000,
   "stage3_prefetch_bucket_size": 0, "stage3_max_live_parameters": 0,
   "stage3_max_reuse_distance": 0,
   "offload_param": {"device": "nvme", "nvme_path": "$WORK/swap", "buffer_count": 3,
                     "buffer_size": 34000000, "max_in_cpu": 0},
   "offload_optimizer": {"device": "nvme", "nvme_path": "$WORK/swap", "buffer_count": 9,
                         "pipeline_read": true, "pipeline_write": true}},
 "aio": {"block_size": 1048576, "queue_depth": 8}}
EOF
# run_phase NAME ARGS...: zrt-train on 2 ranks with ARGS, each rank in its own fresh group capped
# at CAP_MB; the log (lines time-stamped) in $WORK/NAME.log, per rank samples in
# $WORK/NAME.io_rank<R>, and "rc wall peak0 peak1 oom0 oom1" in $WORK/NAME.result.
run_phase() {
  local name="$1"; shift
  local root; root="$([[ $MEMCG_MODE == v1 ]] && echo "$MEMCG_V1" || echo "$MEMCG_V2")"
  # Each rank moves itself into its group, then runs zrt-train and samples, twice a second, the
  # kernel's read_bytes / write_bytes of the process (what reached the device), its VmHWM (peak
  # RSS, file-backed pages included) and its RssAnon (kB).
  cat > "$WORK/$name.sh" <<EOF
#!/usr/bin/env bash
rank="\${OMPI_COMM_WORLD_RANK:-0}"
echo \$\$ > "$root/zrt_infinity_$$_${name}_rank\$rank/cgroup.procs"
"\$@" &
child=\$!
while kill -0 "\$child" 2>/dev/null; do
  io="\$(awk '/^read_bytes/{r=\$2} /^write_bytes/{w=\$2} END{print r, w}' /proc/\$child/io 2>/dev/null)"
  mem="\$(awk '/^VmHWM/{h=\$2} /^RssAnon/{a=\$2} END{print h, a}' /proc/\$child/status 2>/dev/null)"
  [[ -n "\$io" && -n "\$mem" ]] && echo "\$(date +%s.%N) \$io \$mem" >> "$WORK/$name.io_rank\$rank"
  sleep 0.5
done
wait "\$child"
EOF
  local cgs=()
  for r in 0 1; do cgs+=("$(memcg_make "zrt_infinity_$$_${name}_rank$r" "$CAP_MB")"); done
  CGS+=("${cgs[@]}")
  local start; start=$(date +%s.%N)
  set +e
  "$BIN/zrt-launch" --np 2 --timeout 7200 -- bash "$WORK/$name.sh" "$BIN/zrt-train" \
    --deepspeed "$WORK/ds.json" --model llama --config_name "$WORK/model" \
    --output_dir "$WORK/out" --block_size "$BLOCK" --corpus_bytes 200000 \
    --per_device_train_batch_size 1 --learning_rate 3e-4 --lr_scheduler_type constant \
    --weight_decay 0.0 --bf16 --gradient_checkpointing --logging_steps 1 --seed 7 \
    --max_shard_size 200000000 "$@" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done | tee "$WORK/$name.log"
  local rc=${PIPESTATUS[0]}
  set -e
  local wall; wall=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$rc $wall $(memcg_peak "${cgs[0]}") $(memcg_peak "${cgs[1]}") $(memcg_oom_kills "${cgs[0]}") $(memcg_oom_kills "${cgs[1]}")" > "$WORK/$name.result"
  for cg in "${cgs[@]}"; do memcg_remove "$cg"; done
  echo "$name: exit $rc, wall ${wall}s, cgroup peaks (page cache included) and OOM kills: $(cut -d' ' -f3- "$WORK/$name.result") (cap $CAP_MB MB)"
}

echo "infinity_llama: 2 ranks, cap $CAP_MB MB each, block $BLOCK, $STEPS steps + 2 resumed, swap in $WORK/swap"
# Train, saving a DeepSpeed-layout checkpoint at the last step (and the model), then resume from it.
run_phase train --max_steps "$STEPS" --save_strategy steps --save_steps "$STEPS"
run_phase resume --max_steps $((STEPS + 2)) --save_strategy no --resume_from_checkpoint last
# The disk's limit for one step's bytes: the plain O_DIRECT loop on a file of one rank's swap.
limit="$("$BUILD/bench/aio_limit" --dir "$WORK" --bytes 1G --block-size 1M --queue-depth 8 \
  --reps 3 --json 2>/dev/null | tail -1 || true)"
echo "aio_limit (1 GiB, block 1 MiB, queue depth 8): $limit"
cat "$WORK/train.log" "$WORK/resume.log" > "${LOG:-$DIR/infinity_llama.log}"
rc=$(( $(cut -d' ' -f1 "$WORK/train.result") | $(cut -d' ' -f1 "$WORK/resume.result") ))
python3 - "$WORK" "$CAP_MB" "$BLOCK" "$LAYERS" "$limit" "${JSONL:-/dev/null}" <<'PY'
import bisect, json, re, sys
work, cap, block, layers, limit, jsonl = sys.argv[1:]
lim = json.loads(limit) if limit.startswith("{") else None

def at(rows, t):  # the last sample at or before t
    i = bisect.bisect_right([row[0] for row in rows], t) - 1
    return rows[max(i, 0)]

def phase(name):
    text = open(f"{work}/{name}.log").read()
    rc, wall, p0, p1, o0, o1 = open(f"{work}/{name}.result").read().split()
    stamps = [float(l.split()[0]) for l in text.splitlines() if "'loss':" in l]
    samples = [[tuple(float(x) for x in l.split()) for l in open(f"{work}/{name}.io_rank{r}")
                if len(l.split()) == 5] for r in (0, 1)]
    steps = []
    for a, b in zip(stamps, stamps[1:]):  # from the second step (the first records the trace)
        rd = sum(at(rows, b)[1] - at(rows, a)[1] for rows in samples)
        wr = sum(at(rows, b)[2] - at(rows, a)[2] for rows in samples)
        s = {"seconds": round(b - a, 2), "read_bytes": int(rd), "write_bytes": int(wr)}
        if lim:
            s["seconds_at_disk_limit"] = round(rd / 1e9 / lim["read_gbps_median"]
                                               + wr / 1e9 / lim["write_gbps_median"], 2)
        steps.append(s)
    saved = re.search(r"saved checkpoint \S+: \d+ files, (\d+) bytes in ([0-9.e+-]+) s", text)
    params = re.search(r"([0-9]+) parameters", text)
    return {"exit": int(rc), "wall_s": round(float(wall), 1), "cgroup_peak_mb": [int(p0), int(p1)],
            "oom_kills": [int(o0), int(o1)],
            "peak_rss_mb": [int(rows[-1][3]) >> 10 if rows else None for rows in samples],
            "peak_anon_mb": [int(max(row[4] for row in rows)) >> 10 if rows else None
                             for rows in samples],
            "losses": [float(x) for x in re.findall(r"'loss': ([0-9.e+-]+)", text)],
            "steps": steps, "parameters": int(params.group(1)) if params else None,
            "checkpoint_bytes_rank0": int(saved.group(1)) if saved else None,
            "checkpoint_save_s_rank0": float(saved.group(2)) if saved else None}

row = {"cap_mb": int(cap), "block": int(block), "layers": int(layers), "limit": lim,
       "train": phase("train"), "resume": phase("resume")}
for name in ("train", "resume"):
    p = row[name]
    print(f"{name}: exit {p['exit']}, per rank peak RSS (VmHWM) {p['peak_rss_mb']} MB, "
          f"peak anonymous RSS (sampled) {p['peak_anon_mb']} MB; losses {p['losses']}")
    for s in p["steps"]:
        print(f"  step: {s['seconds']} s, read {s['read_bytes'] / 2**30:.2f} GiB, written "
              f"{s['write_bytes'] / 2**30:.2f} GiB (both ranks); at the disk's limit "
              f"{s.get('seconds_at_disk_limit')} s")
with open(jsonl, "a") as f:
    f.write(json.dumps(row) + "\n")
PY
exit "$rc"
