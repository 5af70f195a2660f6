#!/usr/bin/env bash
# PDC versus colocated on the same two cores under a mixed load: prompts of 32 to 1024 tokens
# arrive (Poisson) while earlier requests decode. pdc-1p1d pins prefill to core 0 and decode to
# core 1; colocated runs one instance that prefills and decodes on both cores. Same model,
# KV and batch limits, same traffic (seeded). Writes build/bench/{pdc-1p1d,colocated}.{json,svg}
# and prints the comparison.
#   scripts/bench-pdc.sh [MODEL_DIR] [NUM_PROMPTS] [RATE]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${SUPERNODE_BIN:-$ROOT/build/release/apps/supernode}"
MODEL="${1:-$ROOT/models/small}"
N="${2:-40}"
RATE="${3:-0.5}"
OUT="$ROOT/build/bench"
mkdir -p "$OUT"
[ -f "$MODEL/config.json" ] || "$BIN" model make --preset small --seed 1 --out "$MODEL"
for shape in pdc-1p1d colocated; do
  "$BIN" cluster up --config "$ROOT/configs/$shape.toml" --model "$MODEL"
  trap '"$BIN" cluster down --config "$ROOT/configs/$shape.toml"' EXIT
  "$BIN" bench serve --url http://127.0.0.1:8000 --num-prompts "$N" --request-rate "$RATE" \
    --input-len uniform:32:1024 --output-len 64 --seed 1 --out "$OUT/$shape.json" > /dev/null
  "$BIN" cluster down --config "$ROOT/configs/$shape.toml"
  trap - EXIT
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
r = {s: json.load(open(f"{out}/{s}.json")) for s in ("pdc-1p1d", "colocated")}
print(f"{'':12}{'pdc-1p1d':>12}{'colocated':>12}{'ratio':>8}")
for key, field in [("tpot_ms", "p50"), ("tpot_ms", "p99"), ("itl_ms", "p99"), ("itl_ms", "max"),
                   ("ttft_ms", "p50"), ("ttft_ms", "p99"), ("e2e_ms", "p50")]:
    a, b = r["pdc-1p1d"][key][field], r["colocated"][key][field]
    print(f"{key[:-3] + ' ' + field:12}{a:12.1f}{b:12.1f}{b / a:8.2f}")
for key in ("output_throughput", "request_throughput"):
    a, b = r["pdc-1p1d"][key], r["colocated"][key]
    print(f"{key:12}{a:12.3f}{b:12.3f}{b / a:8.2f}")
PY
