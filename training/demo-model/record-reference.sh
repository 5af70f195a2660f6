#!/usr/bin/env bash
# Re-records tests/model/data/demo_pytorch_reference.json: the PyTorch run CI compares the engine
# against without torch (demo_model_agreement.the_engine_matches_the_recorded_pytorch_run). Run
# it after retraining, on a machine with training/demo-model/setup.sh's packages; it runs the
# live agreement test, which writes the request it sends, then records from the same request.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
./supernode test -R 'demo_model_agreement.pytorch_and_the_engine_agree_in_fp32' >/dev/null
WORK=build/release/demo-agreement
/usr/bin/python3 training/demo-model/reference.py --model build/release/test-models/demo \
  --request "$WORK/request.json" --out "$WORK/record" \
  --record tests/model/data/demo_pytorch_reference.json
echo "recorded tests/model/data/demo_pytorch_reference.json"
