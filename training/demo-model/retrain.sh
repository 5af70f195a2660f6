#!/usr/bin/env bash
# Retrains the demo model and rewrites training/demo-model/demo-weights.safetensors, the compact
# file `supernode model make --preset demo` expands (README.md here says what each step does).
# About 65 minutes on one core of an AMD EPYC; resumable: run it again after an interruption and
# training continues from its last checkpoint, step for step as if never stopped.
#   DEMO_WORK=DIR  where the corpus, checkpoints and figures go (default build/demo-model)
#   DEMO_STEPS=N   training steps (default 1000, the shipped model's)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="${DEMO_WORK:-$ROOT/build/demo-model}"
PY=/usr/bin/python3 # Debian's, where python3-torch installs
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 # training shares the machine

"$HERE/setup.sh"
"$ROOT/scripts/setup.sh" # the DeepSeek-V3 tokenizer
cd "$HERE"
[[ -s "$WORK/corpus/train.json" ]] || $PY prepare_corpus.py "$WORK/corpus"
$PY train.py --corpus "$WORK/corpus" --run "$WORK/run" --steps "${DEMO_STEPS:-1000}" --seed 1 \
  --eval-every 50 --checkpoint-every 50
$PY export.py --run "$WORK/run" --corpus "$WORK/corpus" --out "$HERE/demo-weights.safetensors"
$PY evaluate.py --run "$WORK/run" --corpus "$WORK/corpus" --out "$WORK/eval"
