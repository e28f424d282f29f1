#!/usr/bin/env bash
# Fuzzes lfm's parsers with libFuzzer (clang, ASan + UBSan). Usage:
#   scripts/fuzz.sh [TARGET|all] [SECONDS]   (default: all, 30 s each)
# TARGET: gguf safetensors config tokenizer jinja output_parser http engine server grammar grammar_budget image audio.
# Builds build-fuzz/ (-DLFM_FUZZ=ON with clang++), seeds a working corpus per target from
# tests/data and fuzz/regressions/TARGET (every crash found so far, kept as a regression input),
# and runs each harness for SECONDS with a 10 s per-input timeout and a 2 GB RSS limit. A crash
# leaves its input in build-fuzz/findings/TARGET/ and makes the script exit non-zero; copy it to
# fuzz/regressions/TARGET/ once fixed. The last lines of each run (executions, coverage) are
# printed; full logs are in build-fuzz/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGETS=(gguf safetensors config tokenizer jinja output_parser http engine server grammar grammar_budget image audio)
which=${1:-all}
seconds=${2:-30}
if [ "$which" != all ]; then
  [[ " ${TARGETS[*]} " == *" $which "* ]] || { echo "fuzz.sh: unknown target '$which' (${TARGETS[*]})" >&2; exit 2; }
  TARGETS=("$which")
fi
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is needed (Debian: apt-get install clang)" >&2; exit 2; }

B=build-fuzz
jobs=${FUZZ_JOBS:-$(nproc)}
launcher=()
if command -v ccache >/dev/null 2>&1; then  # as scripts/build.sh: reused across clones
  export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f $B/CMakeCache.txt ]; then
  cmake -S . -B $B -DLFM_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1" \
    -DLFM_BUILD_TESTS=OFF -DLFM_BUILD_BENCH=OFF -DLFM_CUDA=OFF "${launcher[@]}" >/dev/null
else
  cmake -S . -B $B >/dev/null  # picks up new harnesses and sources (make cannot name a target it does not know yet)
fi
cmake --build $B -j"$jobs" --target $(printf 'fuzz_%s ' "${TARGETS[@]}")

# Seed inputs from the test data (copied, so libFuzzer can add to the working corpus freely).
seed() {
  local t=$1 dir=$B/corpus/$1
  mkdir -p "$dir"
  case $t in
    gguf)
      # The llama.cpp-written file (1.2 MB, f32), and when the main build's `lfm` exists, smaller
      # quantized conversions of it and of the Hugging Face fixtures (dense, conv bias, untied,
      # MoE with and without expert bias): every metadata layout the loader reads, 0.3–0.5 MB each.
      cp tests/data/gguf_llamacpp/*.gguf "$dir"/
      if [ -x build/lfm ]; then
        build/lfm convert -q -m tests/data/gguf_llamacpp/lfm2-tiny-random-f32.gguf --type q8_0 -o "$dir/llamacpp_q8_0.gguf"
        build/lfm convert -q -m tests/data/gguf_llamacpp/lfm2-tiny-random-f32.gguf --type q4_k_m -o "$dir/llamacpp_q4_k_m.gguf"
        for f in lfm2_c_layertypes_untied_convbias_f32 lfm2moe_f_tied_expertbias_f32 lfm2moe_g_untied_nobias_scaled_f32; do
          build/lfm convert -q -m "tests/data/hf/$f" --type q4_0 -o "$dir/$f.q4_0.gguf"
        done
      else
        echo "fuzz.sh: no build/lfm, seeding gguf with the llama.cpp file only (build the project for more seeds)" >&2
      fi ;;
    safetensors)
      # Small files (the fixtures' are 1.3 MB, which slows every execution): a synthetic one, and
      # each fixture's real header with its data section cut to 64 bytes.
      python3 - "$dir" <<'EOF'
import glob, json, os, struct, sys
h = json.dumps({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}).encode()
open(os.path.join(sys.argv[1], "synthetic"), "wb").write(struct.pack("<Q", len(h)) + h + bytes(22))
for f in glob.glob("tests/data/hf/*/model.safetensors"):
    b = open(f, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    open(os.path.join(sys.argv[1], os.path.basename(os.path.dirname(f))), "wb").write(b[:8 + n + 64])
EOF
      ;;
    config)
      for f in tests/data/hf/*/config.json tests/data/assets/lfm2/*/config.json; do
        cp "$f" "$dir/$(basename "$(dirname "$f")").json"
      done ;;
    tokenizer)
      # tokenizer.json, NUL, tokenizer_config.json (the harness splits there). The test pair is
      # 300 KB, slow to load on every execution (~150/s), so the seeds are that pair cut down to
      # a few KB with its structure intact (real regex, post-processor, decoders, added tokens with
      # their flags, BPE with ignore_merges), plus a minimal one.
      python3 - "$dir" <<'EOF'
import json, os, sys
t = json.load(open("tests/data/tokenizer/tokenizer.json"))
c = json.load(open("tests/data/tokenizer/tokenizer_config.json"))
vocab, merges = t["model"]["vocab"], t["model"]["merges"]
added = [a for a in t["added_tokens"] if a["id"] < 12 or "im_" in a["content"] or "tool" in a["content"]][:24]
keep = {a["content"] for a in added} | {k for k in vocab if len(k) == 1}
kept_merges = []
for m in merges[:400]:
    a, b = m.split(" ") if isinstance(m, str) else m
    if a in keep and b in keep:
        kept_merges.append(m)
        keep.add(a + b)
tokens = sorted(keep, key=lambda k: vocab[k])
new_id = {k: i for i, k in enumerate(tokens)}
t["model"]["vocab"] = {k: new_id[k] for k in tokens}
t["model"]["merges"] = kept_merges
for a in added:
    a["id"] = new_id[a["content"]]
t["added_tokens"] = added
for proc in t["post_processor"].get("processors", [t["post_processor"]]):
    for tok in proc.get("special_tokens", {}).values():
        tok["ids"] = [new_id.get(x, 0) for x in tok["tokens"]]
c["added_tokens_decoder"] = {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}
open(os.path.join(sys.argv[1], "pair_small"), "wb").write(json.dumps(t).encode() + b"\0" + json.dumps(c).encode())
open(os.path.join(sys.argv[1], "alone_small"), "wb").write(json.dumps(t).encode())
EOF
      # A minimal one.
      printf '%s\0%s' '{"added_tokens": [{"id": 0, "content": "<s>", "special": true}, {"id": 5, "content": "<|im_end|>", "special": true, "lstrip": true}], "normalizer": null, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "b": 2, "c": 3, "ab": 4}, "merges": ["a b"]}}' '{"bos_token": "<s>", "add_bos_token": true, "added_tokens_decoder": {"5": {"content": "<|im_end|>", "special": true}}}' > "$dir/minimal" ;;
    jinja)
      for f in tests/data/assets/lfm2/chat_templates/*.jinja tests/data/assets/lfm2/*/chat_template.jinja; do
        [ -f "$f" ] && cp "$f" "$dir/$(basename "$(dirname "$f")")_$(basename "$f")"
      done
      python3 - "$dir" <<'EOF'
import json, sys, os
data = json.load(open("tests/data/chat/jinja_snippets.json"))
for key in ("snippets", "refused"):
    for i, src in enumerate(data.get(key, [])):
        if isinstance(src, str) and src:
            open(os.path.join(sys.argv[1], f"{key}_{i}"), "w").write(src)
EOF
      ;;
    output_parser)
      printf '\x03<think>plan</think>Answer <|tool_call_start|>[f(x=1, y=[1, {"a": None}])]<|tool_call_end|> done' > "$dir/pythonic"
      printf '\x01<|tool_call_start|>[{"name": "f", "arguments": {"a": [1, 2]}}]<|tool_call_end|>' > "$dir/json"
      printf '\x05plain text <|tool_call_start|>[g(' > "$dir/unterminated" ;;
    http)
      printf '%s' '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "auto", "max_tokens": 5, "logit_bias": {"1": 2}, "stop": ["x"], "logprobs": true, "top_logprobs": 2}' > "$dir/chat"
      printf '%s' '{"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0.5, "seed": 7, "logprobs": 2}' > "$dir/completion" ;;
    engine)
      # The harness reads its input as choices (FuzzedDataProvider): any bytes are a workload.
      python3 - "$dir" <<'EOF'
import os, random, sys
rng = random.Random(7)
for i in range(16):
    open(os.path.join(sys.argv[1], f"random_{i}"), "wb").write(bytes(rng.randrange(256) for _ in range(rng.randrange(40, 400))))
EOF
      ;;
    grammar|grammar_budget)
      # Kind byte (0 GBNF, 1 JSON schema, 2 regex) then the text: the test grammars and schemas
      # (grammar_budget also gets the grammar target's regressions and the hostile inputs of
      # tests/grammar_budget_test.cpp, kept in fuzz/regressions/grammar_budget/).
      [ "$t" = grammar_budget ] && cp fuzz/regressions/grammar/* "$dir"/ 2>/dev/null || true
      python3 - "$dir" <<'EOF'
import glob, json, os, re, sys
out = sys.argv[1]
src = open("tests/grammar_test_util.h").read()
for i, g in enumerate(re.findall(r'R"G\((.*?)\)G"', src, re.S)):
    open(os.path.join(out, f"gbnf_{i}"), "wb").write(b"\x00" + g.encode())
for f in sorted(glob.glob("tests/data/grammar/schemas/*.json"))[:40]:
    open(os.path.join(out, "schema_" + os.path.basename(f)), "wb").write(b"\x01" + json.dumps(json.load(open(f))["schema"]).encode())
for i, r in enumerate([r"[a-z]{3,8}@[a-z]+\.(com|org)", r"(yes|no)?\d+", r'^[^"\\]*$', r"(a|b)*c{2,}"]):
    open(os.path.join(out, f"regex_{i}"), "wb").write(b"\x02" + r.encode())
EOF
      ;;
    image)
      # The first byte picks the processor config (fuzz_image.cpp); the rest is a test image: every
      # small decoder test file (modes, EXIF, interlacing, animation, truncations) and the hostile ones.
      for f in tests/data/image/files/*; do
        [ "$(stat -c %s "$f")" -le 65536 ] || continue
        { printf '\x00'; cat "$f"; } > "$dir/$(basename "$f")"
      done ;;
    audio)
      # The first byte picks the target rate and the path (fuzz_audio.cpp); the rest is one of the
      # small files of tests/data/audio/files (every container and codec the decoder reads, made by
      # make_files.py there), and one raw int16 input.
      for f in tests/data/audio/files/*; do
        case $f in *.py) continue ;; esac
        { printf '\x01'; cat "$f"; } > "$dir/$(basename "$f")"
      done
      head -c 2000 tests/data/audio/files/tone440_16k_pcm16.wav | { printf '\x85\x01'; cat; } > "$dir/raw_pcm16" ;;
    server)
      # Whole connections: every route, streamed and not, pipelined requests, chunked bodies,
      # 100-continue, and the framing cases the server refuses.
      python3 - "$dir" <<'EOF'
import json, os, sys
def req(method, path, body=None, extra=""):
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}"
    if body is None:
        return (head + "\r\n").encode()
    b = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return (head + f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n\r\n").encode() + b
chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
seeds = {
    "chat": req("POST", "/v1/chat/completions", chat),
    "chat_stream": req("POST", "/v1/chat/completions", dict(chat, stream=True, stream_options={"include_usage": True})),
    "chat_tools": req("POST", "/v1/chat/completions", dict(chat, tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], tool_choice="required", logprobs=True, top_logprobs=2)),
    "completion": req("POST", "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0.5, "seed": 7, "logprobs": 2, "speculative": {"draft": "ngram", "max_drafts": 3}}),
    "completion_text": req("POST", "/v1/completions", {"prompt": "hello", "max_tokens": 2, "stop": ["x"], "stream": True}),
    "probes": req("GET", "/health") + req("GET", "/v1/models") + req("GET", "/metrics"),
    "tokenize": req("POST", "/tokenize", {"content": "hello world"}) + req("POST", "/detokenize", {"tokens": [1, 2, 3]}),
    "chunked": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n1e\r\nmpt\": [1, 2], \"max_tokens\": 2}\r\n0\r\n\r\n",
    "expect": req("POST", "/v1/completions", {"prompt": [5], "max_tokens": 1}, "Expect: 100-continue\r\n"),
    "two_lengths": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "length_and_chunked": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
}
for name, data in seeds.items():
    open(os.path.join(sys.argv[1], name), "wb").write(data)
EOF
      ;;
  esac
}

dict_of() {
  case $1 in
    gguf) echo fuzz/dict/gguf.dict ;;
    jinja) echo fuzz/dict/jinja.dict ;;
    output_parser|engine|image|audio) echo "" ;;
    server) echo fuzz/dict/http.dict ;;
    *) echo fuzz/dict/json.dict ;;
  esac
}

# One harness for SECONDS; FUZZ_JOBS of them run side by side (one core each).
run_target() {
  local t=$1 d
  d=$(dict_of "$t")
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=1400000
              -artifact_prefix="$B/findings/$t/" -print_final_stats=1)
  [ -n "$d" ] && args+=(-dict="$d")
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$B/fuzz/fuzz_$t" "${args[@]}" "$B/corpus/$t" "fuzz/regressions/$t" >"$B/logs/$t.log" 2>&1
}

mkdir -p $B/logs
for t in "${TARGETS[@]}"; do
  seed "$t"
  mkdir -p "$B/findings/$t" "fuzz/regressions/$t"
done
echo "== fuzzing ${TARGETS[*]} for ${seconds}s each, $jobs at a time" >&2
declare -A pid_of
for t in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_target "$t" &
  pid_of[$t]=$!
done
status=0
for t in "${TARGETS[@]}"; do
  if wait "${pid_of[$t]}"; then
    echo "fuzz_$t: ok" >&2
  else
    echo "fuzz_$t: FAILED (see $B/logs/$t.log, input in $B/findings/$t/)" >&2
    status=1
  fi
  grep -E "^#[0-9]+.*(DONE|pulse)|stat::number_of_executed_units" "$B/logs/$t.log" | tail -n 2 >&2 || true
done
exit $status
