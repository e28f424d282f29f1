#!/usr/bin/env python3
"""The transformers baseline for LFM2.5-Audio speech-output speed (issue 59): how fast Hugging Face's own code makes
audio frames and waveforms on this machine's CPU, for comparison with lfm's engine.

    /usr/bin/python3 tools/audio_reference/bench_transformers_tts.py [--frames 25] [--repeats 3] [--threads 2]
        [--detok-frames 125] [--hf-ref ../shared/tools/hf_reference] [--overlay $HF_REF_ROOT/overlay/lfm2_audio]

What is built (random weights: speed does not depend on the values; nothing is loaded or stored):
- `Lfm2AudioForConditionalGeneration` of the REAL LFM2.5-Audio-1.5B shape, float32: backbone = the LFM2-1.2B config
  (../shared/assets/lfm2/LFM2-1.2B/config.json: hidden 2048, 16 layers (10 conv, 6 attention), ff 8192 after
  block_auto_adjust_ff_dim, vocab 65536), depthformer = the config defaults (6 layers, dim 1024, 32 heads, 8 kv
  heads, ff 2816), 8 codebooks x 2049, untied audio embeddings, encoder = the NeMo FastConformer defaults of the
  config port (17 layers, d 512; built, not timed).
- `Lfm2AudioDetokenizer`: Lfm2Config hidden 512, 8 layers, 16 heads / 8 kv heads, intermediate_size 3328 with
  block_auto_adjust_ff_dim (-> 2304, the width mlx-audio's port reads from the released weights), output_size 1282,
  sliding_window 30, layer_types [conv, conv, sliding_attention, conv, conv, sliding_attention, conv, conv] (as the
  issue gives it; the released audio_detokenizer/config.json was not available here) and, for comparison,
  mlx-audio's default list [conv, conv, sliding_attention, conv, sliding_attention, conv, sliding_attention, conv].

What is timed (wall clock, time.perf_counter, torch.set_num_threads(--threads), inference mode, best of --repeats):
- `generate(generation_mode="sequential")` after a 33-token TTS-like prompt.  The text embedding row of
  <|audio_start|> (128; tied to the output) is set so that the greedy first token is 128 (as in
  make_speech_out_fixtures.py); random weights never choose the end-of-audio code, so every later step is an audio
  frame.  T(N) = generate(max_new_tokens = 1 + N) gives the prompt pass + the 128 step + N frames; T(0) =
  generate(max_new_tokens = 1) the prompt pass + the 128 decision.  Per frame = (T(N) - T(0)) / N: one backbone
  step (one new position, KV/conv cache) + the depthformer's 8 codebook steps (_sample_audio_frame) + the frame's
  audio embedding.  Frames/s = 1 / per frame; real-time factor = frames/s / 12.5 (seconds of audio per second).
- The depthformer alone: _sample_audio_frame(hidden row) N times (the backbone part = per frame - this).
- The detokenizer: forward(codes [1, 8, --detok-frames]) -> waveform (125 frames = 10 s of 24 kHz audio), whole
  clip at once (as transformers does; no streaming).

Results (2026-12-06, this machine: `lscpu | grep "Model name"` -> "Model name: AMD EPYC"; 2 cores SHARED with other
engineers' compile jobs, load average 11-18 during every run, so wall times are several times what an idle machine
gives; the CPU seconds of this process are printed alongside.  Debian's torch 1.13.1 is built with BLAS_INFO=generic
and the installed libblas.so.3 is the netlib REFERENCE BLAS (~2 GFLOPS gemm here); runs B, C, E load OpenBLAS 0.3.21
(Debian's libopenblas0-pthread .deb unpacked under /tmp, NOT installed: `apt-get download libopenblas0-pthread;
dpkg-deb -x ... /tmp/openblas59/root`) for this process only through LD_LIBRARY_PATH.  Peak RSS 7.0 GB.)

  B  OPENBLAS_NUM_THREADS=1 LD_LIBRARY_PATH=/tmp/openblas59/root/usr/lib/x86_64-linux-gnu/openblas-pthread \
       /usr/bin/python3 tools/audio_reference/bench_transformers_tts.py --threads 1 --frames 10 --repeats 2
  C  the same with OPENBLAS_NUM_THREADS=2 ... --threads 2 --frames 10 --repeats 1
  D  /usr/bin/python3 tools/audio_reference/bench_transformers_tts.py --threads 1 --frames 5 --repeats 1  (reference BLAS)
  E  as C with --frames 25 --repeats 2 (an earlier revision: wall times only)

  run  BLAS       thr  prompt pass, 33 tokens  per frame          frames/s  RTF     RTF from
                        wall / CPU              wall / CPU         (wall)    (wall)  CPU / thr
  B    OpenBLAS   1    5.5 / 1.7 s             3716 / 1317 ms     0.269     0.0215  0.061
  C    OpenBLAS   2    18.5 / 5.4 s            11124 / 3475 ms    0.090     0.0072  0.046
  D    reference  1    76.3 / 24.6 s           3900 / 1374 ms     0.256     0.0205  0.058
  E    OpenBLAS   2    12.8 s wall             10434 ms wall      0.096     0.0077  -

  run  depthformer alone, per frame   detokenizer, 125 frames = 10 s of audio, wall / CPU
       wall / CPU                     issue's layer list    mlx-audio's layer list
  B    1161 / 362 ms                  5.8 / 1.9 s           7.3 / 2.4 s
  C    8460 / 2535 ms                 7.7 / 3.1 s           11.0 / 4.3 s
  D    1444 / 475 ms                  60.7 / 19.0 s         55.2 / 17.8 s
  E    7331 ms wall                   11.7 s wall           15.1 s wall

Reading: one frame costs transformers ~1.3 s of CPU on one thread (B, D agree: the per-frame work is matrix-vector,
memory-bound, so the BLAS hardly matters): ~0.95 s for the backbone step (1.17 B float32 weights = 4.7 GB read per
step) and ~0.36 s for the depthformer's 8 codebook steps (8 passes through its 6 layers: 8 x 68 M = 540 M weights
read per frame, plus depth_linear and 8 output heads); i.e. at best ~0.75 frames/s = real-time factor ~0.06 (16x slower than real time) on an idle core.  Two threads
on this loaded machine are WORSE (C, E: the ~2000 tiny ops per frame each end in an OpenMP barrier whose partner
thread is descheduled; the depthformer costs 2.5 s of CPU instead of 0.36).  The detokenizer is faster than real time
with OpenBLAS (10 s of audio in 1.9 s CPU, one thread) and GEMM-bound (750 positions x 8 layers; the reference BLAS
takes 10x longer).  The depthformer shim (see _sdpa) copies K/V per head group (repeat_interleave); with one thread
that is ~1.4 % of a depth frame (torch profiler), so it does not distort these numbers.
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))

ap = argparse.ArgumentParser()
ap.add_argument("--frames", type=int, default=25, help="audio frames per timed generate() (12.5 per second)")
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--detok-frames", type=int, default=125)
ap.add_argument("--backbone-config", default=os.path.join(REPO, "..", "shared", "assets", "lfm2", "LFM2-1.2B",
                                                          "config.json"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ap.add_argument("--overlay", default=None)
ARGS = ap.parse_args()
for attr, alt in (("hf_ref", "/work/shared/tools/hf_reference"),
                  ("backbone_config", "/work/shared/assets/lfm2/LFM2-1.2B/config.json")):
    if not os.path.exists(getattr(ARGS, attr)) and os.path.exists(alt):  # a git worktree elsewhere
        setattr(ARGS, attr, alt)

sys.path.insert(0, os.path.abspath(ARGS.hf_ref))
import hfenv  # noqa: E402

hfenv.setup("5.2.0")
import vl_compat  # noqa: E402,F401
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
import transformers.models as _tm  # noqa: E402

torch.set_num_threads(ARGS.threads)
transformers.utils.logging.set_verbosity_error()

MODELING_SHA256 = "1d399b775b4f83ea6e0fae3bfaa6f4ced5df93aa5b94fb2bfed09d9bbcd47ff4"  # @ 0945703d, as the fixtures


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """torch 1.13 lacks F.scaled_dot_product_attention (the depthformer calls it directly): the math path."""
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(rep, dim=-3)
        value = value.repeat_interleave(rep, dim=-3)
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return scores.softmax(dim=-1) @ value


if not hasattr(F, "scaled_dot_product_attention"):
    F.scaled_dot_product_attention = _sdpa


def lay_over():
    src = ARGS.overlay or os.path.join(hfenv.HF_ROOT, "overlay", "lfm2_audio")
    p = os.path.join(src, "modeling_lfm2_audio.py")
    with open(p, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != MODELING_SHA256:
            sys.exit(f"{p}: not the upstream file the fixtures use")
    tmp = tempfile.mkdtemp(prefix="lfm2audio_bench_")
    pkg = os.path.join(tmp, "lfm2_audio")
    os.makedirs(pkg)
    shutil.copy(p, pkg)
    shutil.copy(os.path.join(HERE, "configuration_lfm2_audio.py"), pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    _tm.__path__.append(tmp)
    return tmp


_TMP = lay_over()
from transformers import Lfm2Config  # noqa: E402
from transformers.models.lfm2_audio.configuration_lfm2_audio import Lfm2AudioConfig  # noqa: E402
from transformers.models.lfm2_audio.modeling_lfm2_audio import (  # noqa: E402
    Lfm2AudioDetokenizer, Lfm2AudioForConditionalGeneration)

AUDIO_START = 128
PROMPT = [1, 6, 200, 201, 10] + list(range(300, 312)) + [7, 10, 6, 202, 10] + list(range(400, 406)) + [7, 10, 6, 203, 10]
DETOK_LAYERS = {
    "issue": ["conv", "conv", "sliding_attention", "conv", "conv", "sliding_attention", "conv", "conv"],
    "mlx_audio_default": ["conv", "conv", "sliding_attention", "conv", "sliding_attention", "conv",
                          "sliding_attention", "conv"],
}


def rss_gb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1e6
    return float("nan")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def blas_in_use():
    """The BLAS shared object torch's libtorch_cpu resolved libblas.so.3 to (Debian's torch is built with
    BLAS_INFO=generic: whatever libblas.so.3 the loader finds)."""
    with open("/proc/self/maps") as f:
        libs = sorted({line.split()[-1] for line in f if "blas" in line.split()[-1]})
    return ", ".join(os.path.realpath(p) for p in libs) or "none found"


def best(fn, repeats):
    """(best wall time, all wall times, process CPU time of the best run): on a machine shared with other jobs the
    CPU seconds (all threads) say what the work costs, the wall seconds what this run got."""
    ts, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        ts.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    i = min(range(repeats), key=lambda k: ts[k])
    return ts[i], ts, cpu[i]


def build_model():
    lfm = json.load(open(ARGS.backbone_config))
    lfm.pop("torch_dtype", None)  # the released bfloat16: this baseline is float32 throughout
    cfg = Lfm2AudioConfig(lfm=lfm)  # depthformer and encoder: the config port's defaults (the released shape)
    torch.manual_seed(0)
    model = Lfm2AudioForConditionalGeneration(cfg).eval().float()
    model.set_attn_implementation("eager")  # torch 1.13: no sdpa for the backbone
    dtypes = {p.dtype for p in model.parameters()}
    assert dtypes == {torch.float32}, dtypes
    return model


@torch.no_grad()
def force_audio_start(model):
    """Make <|audio_start|> the greedy first token after PROMPT (the tied row 128 = a multiple of the prompt's last
    hidden row, winning by 1.0); no other row changes."""
    h = model.model(input_ids=torch.tensor([PROMPT])).last_hidden_state[0, -1].double()
    E = model.model.lfm.embed_tokens.weight
    logits = E.double() @ h
    logits[AUDIO_START] = -float("inf")
    E[AUDIO_START] = (h * (float(logits.max()) + 1.0) / float(h @ h)).float()
    out = model.generate(input_ids=torch.tensor([PROMPT]), max_new_tokens=3, generation_mode="sequential")
    assert out.sequences[0].tolist() == [AUDIO_START] and out.modalities[0].tolist() == [1, 3, 3], out


def main():
    t0 = time.time()
    lscpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip()
    print(f"{lscpu}; torch {torch.__version__}, transformers {transformers.__version__}, threads "
          f"{torch.get_num_threads()}; BLAS {blas_in_use()}; load average {loadavg()}", flush=True)
    model = build_model()
    c = model.config
    n_params = sum(p.numel() for p in model.parameters())
    part = {k: sum(p.numel() for p in getattr(model.model, k).parameters())
            for k in ("lfm", "conformer", "depthformer", "depth_linear", "depth_embeddings", "audio_embedding")}
    print(f"model: {n_params / 1e9:.3f} B parameters float32 ({', '.join(f'{k} {v / 1e6:.1f} M' for k, v in part.items())}); "
          f"backbone ff {model.model.lfm.layers[0].feed_forward.w1.out_features}, depthformer layers "
          f"{c.depthformer.layers} dim {c.depthformer.dim} heads {c.depthformer.num_attention_heads}/"
          f"{c.depthformer.num_key_value_heads} ff {c.depthformer.intermediate_size}; built in {time.time() - t0:.0f} s, "
          f"peak RSS {rss_gb():.1f} GB", flush=True)
    with torch.inference_mode():
        force_audio_start(model)
        ids = torch.tensor([PROMPT])
        n = ARGS.frames
        gen = lambda k: model.generate(input_ids=ids, max_new_tokens=1 + k, generation_mode="sequential")  # noqa: E731
        out = gen(n)
        assert out.modalities[0].tolist() == [1] + [3] * n and out.audio_codes.shape == (1, 8, n)
        t_n, all_n, c_n = best(lambda: gen(n), ARGS.repeats)
        t_0, all_0, c_0 = best(lambda: gen(0), ARGS.repeats)
        per_frame, cpu_frame = (t_n - t_0) / n, (c_n - c_0) / n
        print(f"generate sequential: prompt {len(PROMPT)} tokens; T(0) = {t_0:.3f} s (prompt pass + the 128 step; "
              f"CPU {c_0:.2f} s), T({n}) = {t_n:.3f} s (CPU {c_n:.2f} s) [wall runs "
              f"{', '.join(f'{x:.2f}' for x in all_n)}]", flush=True)
        print(f"  per frame (backbone step + depthformer 8 steps) = {per_frame * 1e3:.1f} ms wall, {cpu_frame * 1e3:.1f} "
              f"ms CPU -> {1 / per_frame:.3f} frames/s, real-time factor {1 / per_frame / 12.5:.4f} (audio s per wall "
              f"s); from CPU time / {ARGS.threads} threads: {ARGS.threads / cpu_frame:.3f} frames/s, RTF "
              f"{ARGS.threads / cpu_frame / 12.5:.4f}", flush=True)
        h = torch.randn(c.lfm.hidden_size, generator=torch.Generator().manual_seed(1))
        t_d, _, c_d = best(lambda: [model._sample_audio_frame(h, None, None) for _ in range(n)], ARGS.repeats)
        print(f"  depthformer alone (_sample_audio_frame x {n}): {t_d / n * 1e3:.1f} ms wall ({c_d / n * 1e3:.1f} ms "
              f"CPU) per frame; backbone step + frame embedding ~ {(per_frame - t_d / n) * 1e3:.1f} ms wall "
              f"({(cpu_frame - c_d / n) * 1e3:.1f} ms CPU); load average {loadavg()}", flush=True)
    del model
    for name, layers in DETOK_LAYERS.items():
        dcfg = Lfm2Config(hidden_size=512, num_hidden_layers=len(layers), num_attention_heads=16,
                          num_key_value_heads=8, intermediate_size=3328, block_auto_adjust_ff_dim=True,
                          block_multiple_of=256, block_ffn_dim_multiplier=1.0, layer_types=layers, vocab_size=65536,
                          norm_eps=1e-5, conv_L_cache=3, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        dcfg.output_size = 1282
        dcfg.sliding_window = 30
        torch.manual_seed(0)
        detok = Lfm2AudioDetokenizer(dcfg).eval()
        detok.set_attn_implementation("eager")
        codes = torch.randint(0, 2048, (1, 8, ARGS.detok_frames), generator=torch.Generator().manual_seed(2))
        with torch.inference_mode():
            wav = detok(codes)
            assert wav.shape == (1, ARGS.detok_frames * 1920), wav.shape
            t_w, all_w, c_w = best(lambda: detok(codes), ARGS.repeats)
        secs = ARGS.detok_frames / 12.5
        print(f"detokenizer ({name}: {sum(t == 'sliding_attention' for t in layers)} attention layers, ff "
              f"{detok.lfm.layers[0].feed_forward.w1.out_features}): {ARGS.detok_frames} frames ({secs:.0f} s, "
              f"{wav.shape[1]} samples at 24 kHz) in {t_w:.3f} s wall, {c_w:.3f} s CPU [wall runs "
              f"{', '.join(f'{x:.3f}' for x in all_w)}] -> real-time factor {secs / t_w:.2f} (from CPU / threads: "
              f"{secs * ARGS.threads / c_w:.2f}); finite {bool(torch.isfinite(wav).all())}", flush=True)
        del detok
    print(f"peak RSS {rss_gb():.1f} GB; total {time.time() - t0:.0f} s; load average {loadavg()}")
    shutil.rmtree(_TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
