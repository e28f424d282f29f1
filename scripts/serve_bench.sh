#!/usr/bin/env bash
# Serving benchmark of `lfm serve` (opt-in, minutes): streamed /v1/completions with random
# 128-token prompts and 64 generated tokens per request, at concurrency 1, 4 and 16; prints
# generated tok/s, TTFT and inter-token latency p50/p95/p99 per concurrency (tools/server-tests/load.mjs).
# With LLAMA_SERVER=/path/to/llama-server (built outside this repo, see bench/README.md) the same
# load runs against llama.cpp's server on the same GGUF, one server at a time.
# Usage: scripts/serve_bench.sh MODEL [extra lfm serve options]
#   env: CONC (1,4,16), REQUESTS (16), THREADS (2), PARALLEL (16), PROMPT (128, or LO-HI: lengths
#        drawn uniformly), MAX_TOKENS (64), CTX (256: per sequence, at least the longest prompt
#        plus MAX_TOKENS), PORT (18601; llama-server PORT+1)
# Mixed prompts under load (the scheduling comparison of bench/RESULTS.md):
#   CONC=32 REQUESTS=200 PARALLEL=32 PROMPT=10-800 CTX=1024 scripts/serve_bench.sh MODEL --itl-target-ms 200
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: scripts/serve_bench.sh MODEL [lfm serve options]}"
shift
conc=${CONC:-1,4,16} requests=${REQUESTS:-16} threads=${THREADS:-2} parallel=${PARALLEL:-16}
prompt=${PROMPT:-128} max_tokens=${MAX_TOKENS:-64} ctx=${CTX:-256} port=${PORT:-18601}
# Random weights emit every id; ids that are special or not whole UTF-8 alone are banned for
# both servers (llama-server fails a stream on them). Scanned once per model, then cached.
ban="/tmp/lfm_serve_bench_ban_$(basename "$model").json"
args=(--concurrency "$conc" --prompt "$prompt" --max-tokens "$max_tokens" --requests "$requests" --vocab 3000
      --ban-undecodable "$(build/lfm info -m "$model" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["vocab_size"])')"
      --ban-file "$ban")
log=$(mktemp)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -f "$log"' EXIT
# Up = lfm's /ready is 200 (its /health answers while the model loads); llama-server has no /ready (404):
# its /health is 200 once loaded.
wait_up() {
  for _ in $(seq 600); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$1/ready")
    [ "$code" = 200 ] && return 0
    [ "$code" = 404 ] && curl -sf "$1/health" >/dev/null && return 0
    sleep 0.2
  done
  echo "server did not start" >&2; cat "$log" >&2; exit 1
}

echo "== lfm serve ($model)"
build/lfm serve -m "$model" --port "$port" --parallel "$parallel" --ctx-size "$ctx" -t "$threads" "$@" > "$log" 2>&1 &
pid=$!
wait_up "http://127.0.0.1:$port"
node tools/server-tests/load.mjs bench "http://127.0.0.1:$port" "${args[@]}"
kill -TERM $pid; wait $pid || true; pid=

if [ -n "${LLAMA_SERVER:-}" ]; then
  echo "== llama-server ($model)"
  LD_LIBRARY_PATH="$(dirname "$LLAMA_SERVER")" "$LLAMA_SERVER" -m "$model" --port $((port + 1)) -np "$parallel" \
    -c $((parallel * ctx)) -t "$threads" --no-jinja --reasoning-format none > "$log" 2>&1 &
  pid=$!
  wait_up "http://127.0.0.1:$((port + 1))"
  node tools/server-tests/load.mjs bench "http://127.0.0.1:$((port + 1))" "${args[@]}" --native 1
  kill -TERM $pid; wait $pid || true; pid=
fi
