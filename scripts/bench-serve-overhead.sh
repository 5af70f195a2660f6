#!/usr/bin/env bash
# What serving costs: output tokens/s of `supernode serve` (every role in one process) at
# concurrency 1 and 16, against the reference engine generating the same requests in batches
# of the same size, in the same run (`bench serve --compare-engine`). The load generator runs
# on the same two cores; its own CPU time is printed so the overhead can be read with and
# without it (client CPU: its share of the two cores while the load ran). Writes build/bench/overhead-c{1,16}.json.
#   scripts/bench-serve-overhead.sh [MODEL_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${SUPERNODE_BIN:-$ROOT/build/release/apps/supernode}"
MODEL="${1:-$ROOT/models/small}"
OUT="$ROOT/build/bench"
PORT=8010
mkdir -p "$OUT"
[ -f "$MODEL/config.json" ] || "$BIN" model make --preset small --seed 1 --out "$MODEL"
"$BIN" serve --model "$MODEL" --port "$PORT" > "$OUT/overhead-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
until grep -q '^ready' "$OUT/overhead-server.log"; do
  kill -0 $SERVER 2>/dev/null || { cat "$OUT/overhead-server.log"; exit 1; }
  sleep 0.2
done
for c in 1 16; do
  n=$((c == 1 ? 8 : 32))
  "$BIN" bench serve --url "http://127.0.0.1:$PORT" --num-prompts $n --concurrency $c \
    --input-len 128 --output-len 64 --seed 1 --compare-engine "$MODEL" > "$OUT/overhead-c$c.json"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'concurrency':>11}{'server tok/s':>14}{'engine tok/s':>14}{'overhead':>10}"
      f"{'TPOT p50 ms':>13}{'client CPU':>12}")
for c in (1, 16):
    r = json.load(open(f"{out}/overhead-c{c}.json"))
    print(f"{c:>11}{r['output_throughput']:>14.1f}{r['engine']['output_throughput']:>14.1f}"
          f"{100 * r['serving_overhead']:>9.1f}%{r['tpot_ms']['p50']:>13.1f}"
          f"{100 * r['client_cpu_s'] / r['duration_s'] / 2:>11.1f}%")
PY
