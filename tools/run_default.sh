#!/usr/bin/env bash
# The README's main job: start `penstock serve` on the embedded tiny model in the background, wait for /health, run a
# short `penstock bench` against it, print the summary, and stop the server (SIGTERM drain) whatever happens.
# Usage: tools/run_default.sh [BUILD_DIR]   (default: build)
set -euo pipefail
BUILD="${1:-build}"
BIN="$BUILD/penstock"
OUT="${PENSTOCK_RUN_DIR:-$BUILD/bench-out}"
mkdir -p "$OUT"
LOG="$OUT/server.log"
"$BIN" serve --port 0 > "$LOG" 2>&1 &
PID=$!
cleanup() { kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
trap cleanup EXIT
PORT=""
for _ in $(seq 1 200); do
  PORT="$(grep -o '127.0.0.1:[0-9]*' "$LOG" | head -1 | cut -d: -f2 || true)"
  if [ -n "$PORT" ] && curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1; then break; fi
  if ! kill -0 "$PID" 2>/dev/null; then echo "server exited:"; cat "$LOG"; exit 1; fi
  sleep 0.1
done
echo "server up on port $PORT (log: $LOG)"
"$BIN" bench --base-url "http://127.0.0.1:$PORT" --dataset random-ids --input-len 512 --output-len 4 \
  --num-prompts 32 --max-concurrency 4 --seed 1 --output-file "$OUT/runs.jsonl" --summary-file "$OUT/summary.json"
echo "summary: $OUT/summary.json"
cat "$OUT/summary.json"
