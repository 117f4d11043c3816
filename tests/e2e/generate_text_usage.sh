#!/usr/bin/env bash
# zrt-generate's text prompts refuse clearly, before loading any weights, whatever the build:
# without tokenizer.json and without SentencePiece in the build, without tokenizer.model in the
# folder, with a file that is not a SentencePiece model, and with no or two prompt sources. Runs in every build (the system
# LibTorch one has no SentencePiece); the text itself is tests/peers/hf_llama_text.py's.
set -euo pipefail
GENERATE="$1"  # build/bin/zrt-generate
WITH_SPM="$2"  # 1 when the build has SentencePiece (ZRT_WITH_SENTENCEPIECE)
dir=$(mktemp -d /tmp/zrt_generate_text_usage.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 32, "hidden_size": 8, "intermediate_size": 16,
 "num_hidden_layers": 1, "num_attention_heads": 2}
JSON
fails=0
# expect EXIT_CODE MESSAGE -- ARGS...: zrt-generate exits with EXIT_CODE and stderr holds MESSAGE.
expect() {
  local code="$1" message="$2"; shift 3
  local rc=0 err
  err=$("$GENERATE" --model_name_or_path "$dir" "$@" 2>&1 >/dev/null) || rc=$?
  if [[ $rc -ne $code || "$err" != *"$message"* ]]; then
    echo "FAILED: zrt-generate $* exited $rc (expected $code) with: $err"
    echo "  expected the message: $message"
    fails=$((fails + 1))
  else
    echo "ok: $* -> exit $rc: ${err##*error: }"
  fi
}
without="this build has no SentencePiece for tokenizer.model"
expect 1 "$([[ $WITH_SPM == 1 ]] && echo "has no tokenizer.model" || echo "$without")" -- --prompt hi
expect 1 "give token ids with --prompt_ids" -- --prompt hi
echo "not a model" >"$dir/tokenizer.model"
expect 1 "$([[ $WITH_SPM == 1 ]] && echo "is not a SentencePiece model" || echo "$without")" -- --prompt hi
expect 1 "give the prompts one way" -- --prompt hi --prompt_ids 1,2
expect 1 "give the prompts one way" --
[[ $fails -eq 0 ]] || exit 1
echo "generate_text_usage: OK"
