#!/usr/bin/env bash
# Prints docs/demo-model.md's samples as Markdown: greedy and sampled completions of English and
# Chinese prompts and one chat, from our engine on the expanded demo model (INT8, as served).
#   samples.sh [MODEL_DIR]   (default: models/demo, made on first use)
#   SUPERNODE_BIN=build/release/apps/supernode skips the set-up and build (SUPERNODE_HOME set)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SN="${SUPERNODE_BIN:-$ROOT/supernode}" # ./supernode sets up and builds first
MODEL=(); if (($#)); then MODEL=(--model "$1"); fi
text_of() { /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])'; }
for prompt in "Once upon a time" "And the LORD said unto Moses," "Blessed are the" \
              "床前明月光，" "学而时习之，" "人生"; do
  echo "**$prompt**"
  echo
  echo "- greedy: $prompt$("$SN" generate "${MODEL[@]}" --prompt "$prompt" --max-tokens 40 --json | text_of | tr '\n' ' ')"
  for seed in 1 2; do
    echo "- sampled (T 0.8, top-p 0.95, seed $seed): $prompt$("$SN" generate "${MODEL[@]}" --prompt "$prompt" \
      --max-tokens 40 --temperature 0.8 --top-p 0.95 --seed $seed --json | text_of | tr '\n' ' ')"
  done
  echo
done
chat=$(mktemp)
trap 'rm -f "$chat"' EXIT
echo '{"messages": [{"role": "user", "content": "Who made the heaven and the earth?"}]}' > "$chat"
ids=$("$SN" tokenize "${MODEL[@]}" --chat "$chat")
echo "**chat** (user: \"Who made the heaven and the earth?\", DeepSeek-V3's chat template)"
echo
echo "- greedy: $("$SN" generate "${MODEL[@]}" --prompt-ids "$ids" --max-tokens 40 --json | text_of | tr '\n' ' ')"
