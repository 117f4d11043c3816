#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan, coverage) into a separate build dir
# and runs each for a set time, one after the other (the machine may have only 2 cores):
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET ...]
#
# Targets: fuzz_config (config loader, resolver, HF layer), fuzz_pt_reader (.pt zip + unpickler,
# strict and tolerant), fuzz_safetensors. Seeds: examples/configs, tests/data/bad/configs, .pt and
# safetensors files written by fuzz_make_seeds (and by Python's torch.save when /usr/bin/python3
# has torch), and tests/data/bad/fuzz/<target>/ (inputs that once crashed: regression seeds).
# Corpora grow in $BUILD/corpus/<target> across runs; crashes land in $BUILD/artifacts/<target>/.
# Prints one summary line per target (seconds, executions, corpus size, crashes) and exits 1 when
# any target found a crash, leak, timeout or out-of-memory input.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${ZRT_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then TARGETS=(fuzz_config fuzz_pt_reader fuzz_safetensors); fi

FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize=fuzzer-no-link"
FLAGS="$FLAGS -fno-omit-frame-pointer -g -O1"
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" -DZRT_BUILD_FUZZ=ON \
    -DZRT_BUILD_TESTS=OFF -DZRT_WITH_CUDA=OFF -DZRT_WITH_NCCL=OFF -DZRT_WITH_MPI=OFF
fi
# The .pt and safetensors seeds need fuzz_make_seeds (LibTorch); fuzz_config alone builds in a
# minute or two because the config module is torch-free.
NEED_SEEDS=0
for t in "${TARGETS[@]}"; do [[ "$t" == fuzz_config ]] || NEED_SEEDS=1; done
EXTRA=()
if [[ $NEED_SEEDS == 1 ]]; then EXTRA=(fuzz_make_seeds); fi
cmake --build "$BUILD" --parallel "${ZRT_FUZZ_JOBS:-2}" --target "${TARGETS[@]}" "${EXTRA[@]}"

# --- seeds ----------------------------------------------------------------------------------
SEEDS="$BUILD/seeds"
rm -rf "$SEEDS"
mkdir -p "$SEEDS/config" "$SEEDS/python"
cp "$ROOT"/examples/configs/*.json "$ROOT"/tests/data/bad/configs/*.json "$SEEDS/config/"
if [[ $NEED_SEEDS == 1 ]]; then
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 - "$SEEDS/python" <<'PY'
import argparse, collections, sys, torch
d = sys.argv[1]
t = torch.arange(12, dtype=torch.float32)
torch.save({"module": collections.OrderedDict(w=t[:6].view(2, 3), b=t[6:]), "step": 3}, d + "/state.pt")
torch.save({"args": argparse.Namespace(lr=0.1), "names": {"a", "b"}, "raw": b"\x00\x01",
            "size": torch.Size([2, 3]), "h": torch.ones(2, dtype=torch.float16)}, d + "/objects.pt")
torch.save([torch.zeros(3, dtype=torch.bfloat16), (1, 2.5, None, True), {"k": [1 << 70]}], d + "/list.pt")
torch.save(torch.nn.Linear(3, 2).state_dict(), d + "/linear.pt")
PY
fi
"$BUILD/fuzz/fuzz_make_seeds" "$SEEDS" "$SEEDS"/python/*.pt
fi

seed_dir() {
  case "$1" in
    fuzz_config) echo "$SEEDS/config" ;;
    fuzz_pt_reader) echo "$SEEDS/pt" ;;
    fuzz_safetensors) echo "$SEEDS/safetensors" ;;
    *) echo "unknown fuzz target $1" >&2; exit 1 ;;
  esac
}
dict_of() {
  case "$1" in
    fuzz_config) echo "$ROOT/fuzz/dicts/config.dict" ;;
    fuzz_pt_reader) echo "$ROOT/fuzz/dicts/pickle.dict" ;;
    fuzz_safetensors) echo "$ROOT/fuzz/dicts/safetensors.dict" ;;
  esac
}

# --- campaign -------------------------------------------------------------------------------
# LibTorch and OpenMP keep process-lifetime allocations; leaks are still checked per input.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:detect_odr_violation=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1
mkdir -p "$BUILD/logs"
status=0
summary=""
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t"
  artifacts="$BUILD/artifacts/$t"
  regress="$ROOT/tests/data/bad/fuzz/$t"
  mkdir -p "$corpus" "$artifacts"
  extra=()
  [[ -d "$regress" ]] && extra+=("$regress")
  before=$(find "$artifacts" -type f | wc -l)
  echo "=== $t: ${SECONDS_PER_TARGET}s"
  start=$(date +%s)
  "$BUILD/fuzz/$t" "$corpus" "$(seed_dir "$t")" "${extra[@]}" -max_total_time="$SECONDS_PER_TARGET" \
    -timeout=25 -rss_limit_mb=4096 -max_len=65536 -dict="$(dict_of "$t")" \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$BUILD/logs/$t.log" 2>&1 || true
  elapsed=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$BUILD/logs/$t.log" | awk '{print $2}' | tail -1)
  found=$(( $(find "$artifacts" -type f | wc -l) - before ))
  cov=$(grep -oE '^#[0-9]+.*cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$BUILD/logs/$t.log" | tail -1 |
        sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+)/coverage \1 edges, \2 features, corpus \3 inputs/')
  line="$t: ${elapsed}s, ${execs:-?} executions, ${cov:-?}, $found new crash/leak/timeout/oom inputs"
  echo "$line"
  summary+="$line"$'\n'
  if [[ $found -gt 0 ]]; then
    status=1
    grep -E 'ERROR|BUG|SUMMARY|Test unit written' "$BUILD/logs/$t.log" | head -20 || true
  fi
done
echo "--- fuzz summary ($(date -u +%Y-%m-%dT%H:%MZ), logs in $BUILD/logs)"
printf '%s' "$summary"
exit $status
