#!/usr/bin/env bash
# The GPU check of issue 36, one command for a lent H200: builds the CUDA backend for sm_90 with
# every core (or, where the machine lacks the build's Debian packages, uses a build-cuda/ made
# elsewhere and carried along), runs the GPU tests (ctest -L cuda), compute-sanitizer memcheck on
# a short run, `lfm bench --device cuda` on random-weight 1.2B files and the 8B-A1B MoE shape, and
# the peer (transformers in bf16 on the same GPU), and writes log.txt plus figures.json into the
# folder it is given. Sized for about 8 minutes; every stage has its own time limit so a hang
# costs that stage only.
#   scripts/device_check.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/device_check.sh OUT_DIR}
mkdir -p "$out"
log="$out/log.txt"
: > "$log"
say() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$log"; }
run() { local limit=$1; shift; timeout "$limit" "$@" >> "$log" 2>&1; local rc=$?; echo "-> rc=$rc" >> "$log"; return $rc; }

say "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv; nproc; git log -1 --format='%H %s'; } >> "$log" 2>&1

B=build-cuda
say "build ($B, sm_90)"
if cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DLFM_CUDA=ON -DLFM_CUDA_ARCHS=90 -DLFM_BUILD_BENCH=OFF >> "$log" 2>&1; then
  run 300 cmake --build $B -j"$(nproc)" --target lfm lfm_cuda_tests || say "build failed"
elif [ -x $B/lfm ]; then
  say "configure failed (missing packages?): using the carried $B/"
else
  say "no build possible and no carried $B/"; exit 1
fi
LFM=$B/lfm

say "GPU tests (ctest -L cuda)"
if [ -f $B/CTestTestfile.cmake ]; then
  run 240 ctest --test-dir $B -L cuda --output-on-failure -j1
else
  run 240 $B/tests/lfm_cuda_tests
fi

say "compute-sanitizer memcheck (one fixture, a short generation)"
fixture=tests/data/hf/lfm2moe_f_tied_expertbias_f32
if command -v compute-sanitizer >/dev/null; then
  run 120 compute-sanitizer --tool memcheck --error-exitcode 9 $LFM generate -m $fixture --prompt-ids 1,2,3,4,5 -n 8 --device cuda
else
  say "compute-sanitizer not found"
fi

say "random-weight files"
models=/tmp/lfm_device_models
mkdir -p $models
[ -d $models/bf16 ] || run 120 $LFM gen-random --shape 1.2B --type bf16 -o $models/bf16 -q
for t in q8_0 q4_0; do
  [ -f $models/$t.gguf ] || run 120 $LFM gen-random --shape 1.2B --type $t -o $models/$t.gguf -q
done
[ -d $models/moe_bf16 ] || run 150 $LFM gen-random --shape 8B-A1B --type bf16 -o $models/moe_bf16 -q

say "lfm bench --device cuda"
bench() {  # name, then lfm bench arguments
  local name=$1; shift
  timeout 150 $LFM bench --device cuda --json "$@" > "$out/bench_$name.json" 2>> "$log" || echo "bench $name failed" >> "$log"
}
bench bf16 -m $models/bf16 -p 512,2048 -n 128 -b 1,64 -d 0,512 -r 2
bench q8_0 -m $models/q8_0.gguf -p 512 -n 128 -r 2
bench q4_0 -m $models/q4_0.gguf -p 512 -n 128 -r 2
bench moe_bf16 -m $models/moe_bf16 -p 512 -n 64 -r 2

say "peer: transformers (bf16, same GPU)"
run 180 python3 tools/bench/hf_gpu_bench.py --model $models/bf16 --out "$out/peer_transformers.json"

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
peer = os.path.join(out, "peer_transformers.json")
if os.path.exists(peer):
    fig["transformers"] = json.load(open(peer))
json.dump(fig, open(os.path.join(out, "figures.json"), "w"), indent=2)
print(json.dumps(fig, indent=2))
PY
say "done"
