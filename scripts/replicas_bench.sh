#!/usr/bin/env bash
# Replicas benchmark (issue 60 item 4, opt-in, minutes): N `lfm serve` replicas on loopback, each
# publishing its KV-cache events (--kv-events, docs/design/kv_events.md), and one chat trace
# (tools/bench/chat_trace.py: multi-turn conversations sharing a few system prompts, each turn's
# prompt the whole history) replayed through tools/bench/route_harness.py once per routing policy:
# round-robin, least-queue (from /metrics), precise (llm-d's precise prefix-cache scorer on an
# index kept from the events) and precise-load (that scorer weighted with queue and KV-cache
# utilisation as llm-d's precise-prefix-cache guide does). Fresh replicas for every policy, so each
# starts from empty caches.
# Prints a markdown table: prefix-cache hit rate, prefill tokens computed, TTFT p50/p99, throughput.
#
# Usage: scripts/replicas_bench.sh [MODEL.gguf MODEL_DIR]
#   MODEL_DIR holds the model's chat template and tokenizer_config.json (the harness renders and
#   tokenizes prompts as the server does). Without arguments a random-weight LFM2-350M-shape Q4_0
#   model with a full-vocabulary test tokenizer is made once under $WORK (BENCHMARKING ONLY).
#   Uses build/lfm (LFM=PATH: another binary); builds nothing.
# env: REPLICAS (4), POLICIES (round-robin,least-queue,precise,precise-load), CONCURRENCY (8),
#      CONVERSATIONS (24), SYSTEMS (8), ZIPF (0.5), TURNS (4-8), SYSTEM_WORDS (200-280: ~400 tokens),
#      USER_WORDS (8-14), REPLY_WORDS (8-14), SEED (1), MAX_TOKENS (8), THREADS (1 per replica), PARALLEL (2),
#      CTX (1024; with PARALLEL 2: a 128-block KV pool per replica, less than the 8 system prompts'
#      ~200 blocks, so a replica cannot hold everything),
#      KV_MEMORY (overrides the pool size), PORT (18801..), EVENTS_PORT (18901..), REPLAY_PORT (18951..),
#      WORK (/tmp/lfm_replicas_bench), OUT (where the JSON records go; default WORK/results)
# The defaults are the cheap run (~7 minutes on 2 shared cores). Scaled up (a few hundred
# conversations; about an hour on 2 cores, minutes on a larger machine with THREADS raised):
#   CONVERSATIONS=300 CONCURRENCY=16 scripts/replicas_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LFM=${LFM:-build/lfm}  # the binary (default: this checkout's build)
[ -x "$LFM" ] || { echo "replicas_bench: $LFM not found (build it: scripts/build.sh release lfm)" >&2; exit 1; }
PY=/usr/bin/python3  # Debian's, with python3-zmq, python3-msgpack, python3-jinja2 (scripts/setup.sh)
replicas=${REPLICAS:-4} policies=${POLICIES:-round-robin,least-queue,precise,precise-load} conc=${CONCURRENCY:-8}
threads=${THREADS:-1} parallel=${PARALLEL:-2} ctx=${CTX:-1024} port=${PORT:-18801} eport=${EVENTS_PORT:-18901} rport=${REPLAY_PORT:-18951}
work=${WORK:-/tmp/lfm_replicas_bench}
out=${OUT:-$work/results}
mkdir -p "$work" "$out"
trace_args=(--conversations "${CONVERSATIONS:-24}" --systems "${SYSTEMS:-8}" --zipf "${ZIPF:-0.5}" --turns "${TURNS:-4-8}"
            --system-words "${SYSTEM_WORDS:-200-280}" --user-words "${USER_WORDS:-8-14}"
            --reply-words "${REPLY_WORDS:-8-14}" --seed "${SEED:-1}")

if [ $# -ge 2 ]; then
  model=$1 model_dir=$2
else
  model=$work/m350-q4_0.gguf model_dir=$work/m350
  if [ ! -f "$model" ]; then
    echo "== making a random LFM2-350M-shape Q4_0 model in $work (once)"
    rm -rf "$model_dir"
    $LFM gen-random --shape 350M -o "$model_dir" -q
    $PY tools/bench/full_vocab_tokenizer.py tests/data/tokenizer/tokenizer.json "$model_dir/tokenizer.json" >/dev/null
    cp tests/data/tokenizer/tokenizer_config.json tests/data/assets/lfm2/LFM2-350M/chat_template.jinja \
       tests/data/assets/lfm2/LFM2-350M/generation_config.json "$model_dir/"
    $LFM convert -m "$model_dir" -o "$model.tmp" --type q4_0 -q -t 2 && mv "$model.tmp" "$model"
  fi
fi

serve_args=(-m "$model" --host 127.0.0.1 -t "$threads" --parallel "$parallel" --ctx-size "$ctx" --no-access-log)
[ -n "${KV_MEMORY:-}" ] && serve_args+=(--kv-memory "$KV_MEMORY")
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT
urls=() events=() replays=()
for i in $(seq 0 $((replicas - 1))); do
  urls+=("http://127.0.0.1:$((port + i))") events+=("tcp://127.0.0.1:$((eport + i))")
  replays+=("tcp://127.0.0.1:$((rport + i))")
done
join() { local IFS=,; echo "$*"; }

echo "== $replicas replicas: lfm serve ${serve_args[*]} --kv-events tcp://*:PORT; trace: ${trace_args[*]}"
$PY tools/bench/chat_trace.py "${trace_args[@]}"
rm -f "$work/tokens.json"  # token ids are shared by this run's policies only
files=()
for policy in ${policies//,/ }; do
  for i in $(seq 0 $((replicas - 1))); do
    # bind (the * in the endpoint): the harness connects, as vLLM's publisher binds by default
    $LFM serve "${serve_args[@]}" --port $((port + i)) --kv-events "tcp://*:$((eport + i))" \
      --kv-events-replay "tcp://*:$((rport + i))" \
      > "$work/replica$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq 0 $((replicas - 1))); do
    for _ in $(seq 600); do curl -sf "${urls[$i]}/ready" >/dev/null && break; sleep 0.2; done
    curl -sf "${urls[$i]}/ready" >/dev/null || { echo "replica $i did not start" >&2; cat "$work/replica$i.log" >&2; exit 1; }
  done
  [ "$policy" = "${policies%%,*}" ] &&
    echo "KV pool per replica: $(curl -s "${urls[0]}/metrics" | awk '/^lfm:kv_blocks_total/ {print $2}') blocks"
  echo "== $policy"
  $PY tools/bench/route_harness.py --replicas "$(join "${urls[@]}")" --events "$(join "${events[@]}")" \
    --replay "$(join "${replays[@]}")" \
    --policy "$policy" --model-dir "$model_dir" --concurrency "$conc" --max-tokens "${MAX_TOKENS:-8}" \
    --token-cache "$work/tokens.json" --out "$out/$policy.json" "${trace_args[@]}"
  files+=("$out/$policy.json")
  stop_all
done
echo
$PY tools/bench/route_harness.py --table "${files[@]}"
