#!/usr/bin/env bash
# The GPU check of issue 36, one command for a lent H200: runs the GPU tests (lfm_cuda_tests, and
# the engine, vision and speculative tests on the CUDA backend), compute-sanitizer memcheck on a
# short run, `lfm bench --device cuda` on random-weight 1.2B files and the 8B-A1B MoE shape,
# `lfm serve --device cuda` under 64 concurrent streams, and the peer (transformers in bf16 on the
# same GPU), and writes log.txt plus figures.json into the folder it is given.
# Binaries: the build packed by scripts/device_pack.sh (.devcarry.tgz, carried along, since the
# GPU machine lacks this project's Debian packages), else a build made here with every core.
# Every stage has its own time limit, and stages that no longer fit DEADLINE seconds (default
# 450) are skipped, so a hang or a slow stage costs that stage only.
#   scripts/device_check.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/device_check.sh OUT_DIR}
mkdir -p "$out"
log="$out/log.txt"
: > "$log"
t0=$(date +%s)
deadline=${DEADLINE:-450}
say() { echo "== $* ($(date -u +%H:%M:%S), +$(($(date +%s) - t0)) s)" | tee -a "$log"; }
# run LIMIT CMD...: CMD with at most LIMIT seconds, fewer if the deadline is nearer; skipped when
# less than 15 s are left.
run() {
  local limit=$1; shift
  local left=$((deadline - ($(date +%s) - t0) - 5))
  if [ "$left" -lt 15 ]; then echo "-> skipped (deadline): $*" >> "$log"; return 99; fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" >> "$log" 2>&1; local rc=$?; echo "-> rc=$rc" >> "$log"; return $rc
}

say "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv; nproc; git log -1 --format='%H %s'; } >> "$log" 2>&1

if [ -f .devcarry.tgz ]; then
  say "binaries: the carried build (.devcarry.tgz)"
  rm -rf devcarry && tar xzf .devcarry.tgz
  cat devcarry/commit >> "$log"
  # cuBLAS from this machine's toolkit or PyTorch's wheels.
  cublas=$( (ls /usr/local/cuda/lib64/libcublas.so.13* /usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.13* 2>/dev/null;
             find /usr/local /usr/lib /opt -name 'libcublas.so.13*' 2>/dev/null) | head -1)
  echo "cuBLAS: ${cublas:-not found}" >> "$log"
  export LD_LIBRARY_PATH=$PWD/devcarry/lib:$(dirname "${cublas:-/}"):${LD_LIBRARY_PATH:-}
  # The tests read tests/data under the path they were built in.
  root=$(cat devcarry/source_root)
  if [ ! -e "$root/tests/data" ]; then mkdir -p "$(dirname "$root")" && ln -sfn "$PWD" "$root"; fi
  mkdir -p devcarry/run
  for b in lfm lfm_cuda_tests lfm_tests $([ -f devcarry/bin/lfm_base ] && echo lfm_base); do
    if devcarry/bin/lfm info --help > /dev/null 2>&1; then
      printf '#!/bin/sh\nexec %s "$@"\n' "$PWD/devcarry/bin/$b" > devcarry/run/$b
    else  # this machine's glibc is older than the build's: bring the build's own
      g=$PWD/devcarry/lib/glibc
      printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$g/ld-linux-x86-64.so.2" "$g:$LD_LIBRARY_PATH" \
        "$PWD/devcarry/bin/$b" > devcarry/run/$b
    fi
    chmod +x devcarry/run/$b
  done
  head -3 devcarry/run/lfm >> "$log"
  LFM=devcarry/run/lfm; CUDA_TESTS=devcarry/run/lfm_cuda_tests; TESTS=devcarry/run/lfm_tests
else
  B=build-cuda
  say "build ($B, sm_90)"
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DLFM_CUDA=ON -DLFM_CUDA_ARCHS=90 -DLFM_BUILD_BENCH=OFF >> "$log" 2>&1 ||
    { say "configure failed (missing packages? run scripts/device_pack.sh and carry .devcarry.tgz)"; exit 1; }
  run 300 cmake --build $B -j"$(nproc)" --target lfm lfm_cuda_tests lfm_tests || { say "build failed"; exit 1; }
  LFM=$B/lfm; CUDA_TESTS=$B/tests/lfm_cuda_tests; TESTS=$B/tests/lfm_tests
fi
ldd devcarry/bin/lfm 2>/dev/null | grep -i "not found" >> "$log"

say "GPU tests (lfm_cuda_tests)"
run 200 $CUDA_TESTS
say "the matmul tests with LFM_CUDA_GEMV=scalar (one warp a row: tells a vector-kernel fault from others)"
run 120 env LFM_CUDA_GEMV=scalar $CUDA_TESTS --gtest_filter='CudaTest.Matmul*:CudaTest.Shared*:CudaTest.Grouped*:CudaTest.Fixtures*:CudaTest.Greedy*'
say "engine tests on the CUDA backend (batching, preemption, prefix cache, cancellation)"
run 200 $TESTS --gtest_filter='Fixtures/EngineTest.*_cuda'
if [ $? -ge 128 ] && [ -x devcarry/bin/lfm_tests ] && command -v cuda-gdb > /dev/null; then
  say "the engine tests crashed: a backtrace of the first one (cuda-gdb)"
  run 120 cuda-gdb -q -batch -ex run -ex bt -ex 'info threads' -ex 'thread apply all bt 12' --args devcarry/bin/lfm_tests \
    --gtest_filter='Fixtures/EngineTest.BatchedSubmissionsMatchRequestsAlone/lfm2_c_la_cuda'
fi

say "paged attention on the GPU (sliding windows; long causal prefills on the tensor-core kernel) against float64 loops"
run 60 $TESTS --gtest_filter='Backends/SlidingAttentionTest.*/cuda'

say "LFM2-VL on the CUDA backend (vision tower and projector within 1e-4 of transformers, logits, engine greedy, staged encoding)"
run 120 $TESTS --gtest_filter='Vl/VisionModelTest.*_cuda'
say "retrievers on the CUDA backend (hidden states, vectors and scores within 1e-4 of transformers; alone = batched)"
run 60 $TESTS --gtest_filter='Fixtures/RetrievalFixtureTest.*_cuda'
run 60 env LFM_CUDA_GEMM=own $TESTS --gtest_filter='Fixtures/RetrievalFixtureTest.TextsAloneAndBatched*_cuda'
say "LFM2-Audio on the CUDA backend (speech encoder ops, encoder/adapter/logits within 1e-4 of transformers, engine greedy)"
run 60 $CUDA_TESTS --gtest_filter='CudaTest.SpeechEncoderOps*'
run 120 $TESTS --gtest_filter='Audio/AudioEncoderFixtureTest.*_cuda:Audio/AudioEngineTest.*_cuda'
say "speculative decoding on the CUDA backend (greedy outputs with every drafter, rollback of device state, stops and logprobs)"
run 150 $TESTS --gtest_filter='Fixtures/*Speculative*.*_cuda_block*'

models=/tmp/lfm_device_models
mkdir -p $models

say "random-weight 1.2B files"
[ -d $models/bf16 ] || run 60 $LFM gen-random --shape 1.2B --type bf16 -o $models/bf16 -q
for t in q8_0 q4_0; do
  [ -f $models/$t.gguf ] || run 60 $LFM gen-random --shape 1.2B --type $t -o $models/$t.gguf -q
done

if [ -f devcarry/bin/lfm_base ]; then
  say "decode A/B: the base build (devcarry/base_commit) and this one alternated, batch 1 and 8"
  cat devcarry/base_commit >> "$log"
  for round in 1 2; do
    for m in bf16 q8_0.gguf q4_0.gguf; do
      for who in base this; do
        bin=$LFM; [ $who = base ] && bin=devcarry/run/lfm_base
        run 40 sh -c "$bin bench --device cuda --json -m $models/$m -p 0 -n 128 -b 1,8 -r 2 > $out/bench_ab_${who}_${m%.gguf}_r$round.json" ||
          echo "bench ab $who $m failed" >> "$log"
      done
    done
  done
fi

say "lfm bench --device cuda"
bench() {  # name, limit, then lfm bench arguments
  local name=$1 limit=$2; shift 2
  run "$limit" sh -c "$LFM bench --device cuda --json $* > $out/bench_$name.json" || echo "bench $name failed" >> "$log"
}
bench bf16 150 -m $models/bf16 -p 512,2048 -n 128 -b 1,64 -d 0,512 -r 2
if [ ! -s $out/bench_bf16.json ]; then  # the tensor-core prefill attention is new: the figures without it
  say "the bf16 bench failed: again with LFM_CUDA_ATTN=plain"
  run 150 sh -c "LFM_CUDA_ATTN=plain $LFM bench --device cuda --json -m $models/bf16 -p 512,2048 -n 128 -b 1,64 -d 0,512 -r 2 > $out/bench_bf16_plain_attn.json" ||
    echo "bench bf16 (plain attention) failed" >> "$log"
fi
say "prefill attention A/B: the CUDA-core kernel (LFM_CUDA_ATTN=plain) against the tensor-core one, alternated"
for round in 1 2; do
  for attn in plain tc; do
    run 40 sh -c "LFM_CUDA_ATTN=$attn $LFM bench --device cuda --json -m $models/bf16 -p 2048 -n 0 -d 0,2048 -r 2 > $out/bench_prefill_attn_${attn}_r$round.json" ||
      echo "bench prefill attn $attn failed" >> "$log"
  done
done

say "CUDA graphs (LFM_CUDA_GRAPHS=stats: ops queued, repeated runs replayed as recorded graphs): tests, then decode"
run 150 env LFM_CUDA_GRAPHS=stats $CUDA_TESTS
run 150 env LFM_CUDA_GRAPHS=stats $TESTS --gtest_filter='Fixtures/EngineTest.*_cuda:DeviceNeutralForward.*'
run 60 sh -c "LFM_CUDA_GRAPHS=stats $LFM bench --device cuda --json -m $models/bf16 -p 0 -n 128 -b 1,64 -d 0,512 -r 2 > $out/bench_bf16_graphs.json" ||
  echo "bench bf16_graphs failed" >> "$log"

# ab_switch VAR TAG: batch-1 decode with VAR=0 and VAR=1 alternated twice, then each in CUDA graphs
# (bench_TAG<value>_r<round>.json, bench_TAG<value>_graphs.json).
ab_switch() {
  local var=$1 tag=$2 round val
  for round in 1 2 graphs; do
    for val in 0 1; do
      local graphs=0 name=r$round
      [ $round = graphs ] && graphs=1 name=graphs
      run 30 sh -c "$var=$val LFM_CUDA_GRAPHS=$graphs $LFM bench --device cuda --json -m $models/bf16 -p 0 -n 128 -b 1 -r 2 > $out/bench_$tag${val}_$name.json" ||
        echo "bench $var=$val ($round) failed" >> "$log"
    done
  done
}

say "programmatic dependent launch of the GEMVs (LFM_CUDA_PDL=1): kernel tests, then batch-1 decode against plain launches (alternated), and in graphs"
run 60 env LFM_CUDA_PDL=1 $CUDA_TESTS
ab_switch LFM_CUDA_PDL pdl

say "the fused launches (a branch's last projection with the residual add and norm, in_proj with the conv, K/V stored by q/k norm + RoPE) against the separate ops (LFM_CUDA_FUSE=0): batch-1 decode alternated, and in graphs"
ab_switch LFM_CUDA_FUSE fuse

say "sampled decode (temperature 0.8, top-k 40): the rows' candidates down against whole rows down"
for from in candidates rows; do
  run 60 sh -c "$LFM bench --device cuda --json -m $models/bf16 -p 0 -n 64 -b 1,64 -r 2 --temperature 0.8 --top-k 40 --sample-from $from > $out/bench_bf16_sampled_$from.json" ||
    echo "bench sampled $from failed" >> "$log"
done

say "serving: lfm serve --device cuda, 64 concurrent streams (tools/bench/serve_load.py: prompts of 128-512 random ids, 64 greedy tokens each)"
serve_port=18611
$LFM serve --device cuda -m $models/bf16 --port $serve_port --parallel 64 --ctx-size 1024 > "$out/serve.log" 2>&1 &
serve_pid=$!
run 120 python3 tools/bench/serve_load.py http://127.0.0.1:$serve_port --wait 60 --concurrency 64 --requests 192 \
  --prompt 128-512 --max-tokens 64 --out "$out/serve_64.json" || echo "serving load failed" >> "$log"
kill -TERM $serve_pid 2> /dev/null; wait $serve_pid 2> /dev/null
tail -3 "$out/serve.log" >> "$log"
say "serving with CUDA graphs (decode steps padded to batch-size buckets: a batch that gains or loses a stream keeps replaying its layers), the same load"
LFM_CUDA_GRAPHS=stats $LFM serve --device cuda -m $models/bf16 --port $serve_port --parallel 64 --ctx-size 1024 > "$out/serve_graphs.log" 2>&1 &
serve_pid=$!
run 120 python3 tools/bench/serve_load.py http://127.0.0.1:$serve_port --wait 60 --concurrency 64 --requests 192 \
  --prompt 128-512 --max-tokens 64 --out "$out/serve_64_graphs.json" || echo "serving load (graphs) failed" >> "$log"
kill -TERM $serve_pid 2> /dev/null; wait $serve_pid 2> /dev/null
tail -3 "$out/serve_graphs.log" >> "$log"

say "the same with LFM_CUDA_GEMM=own (own kernels for every matmul: bitwise batch invariance)"
run 200 env LFM_CUDA_GEMM=own $TESTS --gtest_filter='Fixtures/EngineTest.*_cuda'
run 200 env LFM_CUDA_GEMM=own $CUDA_TESTS

say "where a step's time goes (LFM_CUDA_PROFILE=1: GPU time per op between CUDA events, no waits; =sync: wall time with waits)"
for args in "-p 0 -n 64" "-p 2048 -n 0" "-p 0 -n 16 -b 64" "-p 0 -n 32 -d 2048"; do
  echo "-- lfm bench $args" >> "$log"
  run 60 env LFM_CUDA_PROFILE=1 $LFM bench --device cuda -m $models/bf16 $args -r 1
done
echo "-- lfm bench -p 0 -n 64, LFM_CUDA_PROFILE=sync" >> "$log"
run 60 env LFM_CUDA_PROFILE=sync $LFM bench --device cuda -m $models/bf16 -p 0 -n 64 -r 1

if [ -n "${ONLY_BF16:-}" ]; then say "ONLY_BF16: the other stages skipped"; fi
[ -n "${ONLY_BF16:-}" ] || {
say "compute-sanitizer memcheck (one fixture, a short generation)"
fixture=tests/data/hf/lfm2moe_f_tied_expertbias_f32
if command -v compute-sanitizer >/dev/null; then
  run 90 compute-sanitizer --tool memcheck --error-exitcode 9 $LFM generate -m $fixture --prompt-ids 1,2,3,4,5 -n 8 --device cuda
  run 90 compute-sanitizer --tool memcheck --error-exitcode 9 $LFM generate -m $fixture --prompt-ids 1,2,3,4,5 -n 8 \
    --device cuda --temperature 0.8 --repeat-penalty 1.1 --seed 3
else
  say "compute-sanitizer not found"
fi

say "quantized files' benches"
for t in q8_0 q4_0; do
  bench $t 60 -m $models/$t.gguf -p 512 -n 128 -b 1,64 -r 2
done

say "peer: transformers (bf16, same GPU), one process per mode (PEER_MODES, empty to skip)"
for mode in ${PEER_MODES-prefill static compile}; do
  run 100 env PYTHONUNBUFFERED=1 python3 tools/bench/hf_gpu_bench.py --model $models/bf16 --mode $mode \
    --out "$out/peer_transformers.json" || echo "peer mode $mode failed" >> "$log"
done

say "the 8B-A1B MoE shape"
[ -d $models/moe_bf16 ] || run 90 $LFM gen-random --shape 8B-A1B --type bf16 -o $models/moe_bf16 -q
bench moe_bf16 120 -m $models/moe_bf16 -p 512 -n 64 -b 1,64 -r 2
}

say "figures"
python3 - "$out" <<'PY' >> "$log" 2>&1
import glob, json, os, sys
out = sys.argv[1]
fig = {}
for f in sorted(glob.glob(os.path.join(out, "bench_*.json"))):
    try:
        rows = json.load(open(f))
    except Exception as e:
        fig[os.path.basename(f)] = f"unreadable: {e}"
        continue
    for r in rows:
        if "avg_ts" not in r:
            continue
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        key = f"{os.path.basename(f)[6:-5]} {test} b{r['n_seqs']} d{r['n_depth']}"
        fig[key] = {"tok_s": r["avg_ts"], "read_gb_s": r.get("read_gb_per_s", 0)}
for name, label in (("serve_64.json", "serve 64 streams"), ("serve_64_graphs.json", "serve 64 streams, graphs")):
    serve = os.path.join(out, name)
    if os.path.exists(serve):
        fig[label] = json.load(open(serve))
peer = os.path.join(out, "peer_transformers.json")
if os.path.exists(peer):
    fig["transformers"] = json.load(open(peer))
json.dump(fig, open(os.path.join(out, "figures.json"), "w"), indent=2)
print(json.dumps(fig, indent=2))
PY
say "done"
