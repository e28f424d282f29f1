#!/usr/bin/env bash
# Opt-in loopback load test of `lfm serve` (not part of the default suite: it takes minutes):
# 3 rounds of 200 requests at concurrency 32 with mixed prompt/output lengths; fails on any
# error or on KV blocks / requests left over; prints the server's RSS after each round.
# Usage: scripts/serve_load_test.sh MODEL [extra lfm serve options]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: scripts/serve_load_test.sh MODEL [lfm serve options]}"
shift
bash scripts/setup.sh
log=$(mktemp)
build/lfm serve -m "$model" --port 0 --parallel 8 --ctx-size 512 "$@" > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 300); do grep -q "listening on" "$log" && break; sleep 0.1; done
url=$(grep -o "http://[^ ]*" "$log" | head -1)
node tools/server-tests/load.mjs load "$url" --requests 200 --concurrency 32 --rounds ${ROUNDS:-3} --pid "$pid" ${LOAD_ARGS:-}
kill -TERM $pid
wait $pid
echo "serve_load_test: passed (server exited $?)"
