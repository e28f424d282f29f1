#!/usr/bin/env python3
"""Independent float64 NumPy restatement of the Mimi decoder (no torch, no transformers), checked against
tests/data/audio/mimi_tiny (made by make_mimi_fixtures.py with transformers' MimiModel).

    /usr/bin/python3 tools/audio_reference/crosscheck_mimi_numpy.py [tests/data/audio/mimi_tiny]

It reads the MOSHI-layout file (moshi_format.safetensors: fused in_proj_weight, q/k rows in moshi's interleaved-pair
RoPE order) and follows docs/design/mimi_decoder_research.md op by op with moshi's conventions, so agreeing with the
transformers outputs checks the research note, the weight renaming and the RoPE un-permutation at once:

1. whole clip, window = sliding_window        vs  decode_window (all stages)
2. whole clip, window = infinity             vs  decode_v520 (transformer + waveform)
3. STREAMING, one frame (8 codes) per call, state carried per layer (conv left context, transposed-conv overlap
   tails without bias, all past keys/values masked to the window): must equal (1) to float64 rounding
4. streaming with moshi's ring KV cache (capacity = context, 2 positions written per frame): reported, not asserted
   equal — once past the window the first position of each frame sees context-1 keys instead of context.
Exits non-zero if 1-3 exceed their bounds.
"""
import json
import math
import os
import struct
import sys

import numpy as np

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                           "tests", "data", "audio", "mimi_tiny")
EPS_CODEBOOK = 1e-5  # moshi EuclideanCodebook / transformers MimiEuclideanCodebook epsilon
EPS_LN = 1e-5        # nn.LayerNorm(d_model, eps=1e-5) (moshi create_norm_fn "layer_norm"; transformers norm_eps)
ROPE_MAX_PERIOD = 10000.0
N_CODEBOOKS = 8


def load_safetensors(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        d = f.read()
    assert all(v["dtype"] == "F32" for k, v in h.items() if k != "__metadata__")
    return {k: np.frombuffer(d[v["data_offsets"][0]:v["data_offsets"][1]], dtype="<f4").reshape(v["shape"])
            .astype(np.float64) for k, v in h.items() if k != "__metadata__"}


def f32file(desc):
    return np.fromfile(os.path.join(ROOT, desc["file"]), "<f4").reshape(desc["shape"]).astype(np.float64)


_erf = np.vectorize(math.erf)


def gelu(x):  # exact (erf) GELU: F.gelu default / transformers "gelu"
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def elu(x):  # nn.ELU(alpha=1)
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def layernorm(x, w, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)  # biased variance
    return (x - m) / np.sqrt(v + EPS_LN) * w + b


# ------------------------------------------------------------------------------------------------------------------
# Streaming-capable layers; a whole clip is one call on fresh state. Time-major [T, C] throughout.
class Conv:
    """Causal Conv1d, stride 1: left context (K-1)*dilation samples (zeros at the start), no right padding (for
    stride 1 the MimiConv1d / moshi 'extra padding' is always 0)."""

    def __init__(self, w, b, dilation=1):
        self.w, self.b, self.d = w, b, dilation  # w [Cout, Cin, K]
        self.ctx = (w.shape[2] - 1) * dilation
        self.prev = np.zeros((self.ctx, w.shape[1]))

    def __call__(self, x):
        xp = np.concatenate([self.prev, x], 0)
        T = x.shape[0]
        y = np.zeros((T, self.w.shape[0])) + self.b
        for k in range(self.w.shape[2]):
            y += xp[k * self.d: k * self.d + T] @ self.w[:, :, k].T
        self.prev = xp[xp.shape[0] - self.ctx:] if self.ctx else self.prev
        return y


class ConvTr:
    """Causal ConvTranspose1d (kernel K = 2*stride): full output [(T-1)*S + K], the last K-S trimmed; streaming keeps
    that tail (minus the bias, which the next chunk's outputs already carry) and adds it to the next chunk's head."""

    def __init__(self, w, b, stride, depthwise=False):
        self.w, self.b, self.s, self.dw = w, b, stride, depthwise  # w [Cin, Cout/groups, K]
        self.K = w.shape[2]
        cout = w.shape[0] if depthwise else w.shape[1]
        self.partial = np.zeros((self.K - self.s, cout))

    def __call__(self, x):
        T, S, K = x.shape[0], self.s, self.K
        cout = self.partial.shape[1]
        y = np.zeros(((T - 1) * S + K, cout))
        for k in range(K):
            contrib = x * self.w[:, 0, k] if self.dw else x @ self.w[:, :, k]
            y[k: k + (T - 1) * S + 1: S] += contrib
        y[: K - S] += self.partial
        self.partial = y[T * S:].copy()  # bias not yet added: the tail is carried without it
        y = y[: T * S]
        return y + (self.b if self.b is not None else 0.0)


class ResBlock:
    def __init__(self, W, p, dilation):
        self.c1 = Conv(W[p + ".block.1.conv.conv.weight"], W[p + ".block.1.conv.conv.bias"], dilation)
        self.c2 = Conv(W[p + ".block.3.conv.conv.weight"], W[p + ".block.3.conv.conv.bias"], 1)

    def __call__(self, x):
        return x + self.c2(elu(self.c1(elu(x))))  # true_skip: identity shortcut


class Attention:
    """moshi StreamingMultiheadAttention: fused in_proj (q|k|v rows), interleaved-pair RoPE, causal window
    0 <= q_pos - k_pos < context, softmax(q k^T / sqrt(D)), out_proj. ring=True keeps only `context` cached entries
    after each write (moshi's RingKVCache); otherwise every past key is kept and the mask alone limits the window."""

    def __init__(self, W, p, heads, context, ring):
        self.win, self.wout = W[p + ".in_proj_weight"], W[p + ".out_proj.weight"]
        self.H, self.context, self.ring = heads, context, ring
        C = self.wout.shape[0]
        self.D = C // heads
        self.k = np.zeros((0, heads, self.D))
        self.v = np.zeros((0, heads, self.D))
        self.pos = np.zeros(0, dtype=np.int64)
        self.offset = 0

    def rope(self, x, pos):  # x [T, H, D]; pairs (2i, 2i+1) rotated by pos * max_period^(-2i/D)
        D = self.D
        freqs = np.exp(np.arange(D // 2) * (-math.log(ROPE_MAX_PERIOD) * 2 / D))
        ang = pos[:, None] * freqs[None, :]  # [T, D/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        xr, xi = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = xr * c - xi * s
        out[..., 1::2] = xr * s + xi * c
        return out

    def __call__(self, x):
        T, C = x.shape
        qkv = x @ self.win.T  # [T, 3C]
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, self.H, self.D) for i in range(3))
        pos_q = self.offset + np.arange(T)
        q, k = self.rope(q, pos_q), self.rope(k, pos_q)
        self.k = np.concatenate([self.k, k], 0)
        self.v = np.concatenate([self.v, v], 0)
        self.pos = np.concatenate([self.pos, pos_q])
        if self.ring and self.context is not None and self.k.shape[0] > self.context:
            self.k, self.v, self.pos = self.k[-self.context:], self.v[-self.context:], self.pos[-self.context:]
        delta = pos_q[:, None] - self.pos[None, :]
        ok = delta >= 0
        if self.context is not None:
            ok &= delta < self.context
        scores = np.einsum("thd,shd->hts", q, self.k) / math.sqrt(self.D)
        scores = np.where(ok[None], scores, -np.inf)
        scores -= scores.max(-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, self.v).reshape(T, C)
        self.offset += T
        if not self.ring and self.context is not None:  # drop what no future query can see
            keep = self.pos > self.offset - 1 - self.context
            self.k, self.v, self.pos = self.k[keep], self.v[keep], self.pos[keep]
        return o @ self.wout.T


class Layer:
    def __init__(self, W, p, heads, context, ring):
        self.W, self.p = W, p
        self.attn = Attention(W, p + ".self_attn", heads, context, ring)

    def __call__(self, x):
        W, p = self.W, self.p
        x = x + W[p + ".layer_scale_1.scale"] * self.attn(layernorm(x, W[p + ".norm1.weight"], W[p + ".norm1.bias"]))
        h = layernorm(x, W[p + ".norm2.weight"], W[p + ".norm2.bias"])
        return x + W[p + ".layer_scale_2.scale"] * (gelu(h @ W[p + ".linear1.weight"].T) @ W[p + ".linear2.weight"].T)


class Decoder:
    def __init__(self, W, cfg, context, ring=False):
        self.W = W
        self.emb = []
        for k in range(N_CODEBOOKS):
            rvq = "quantizer.rvq_first.vq.layers.0" if k == 0 else f"quantizer.rvq_rest.vq.layers.{k - 1}"
            p = rvq + "._codebook"
            self.emb.append(W[p + ".embedding_sum"] / np.maximum(W[p + ".cluster_usage"], EPS_CODEBOOK)[:, None])
        self.up = ConvTr(W["upsample.convtr.convtr.convtr.weight"], None, 2, depthwise=True)
        n_layers = len({k.split(".")[3] for k in W if k.startswith("decoder_transformer.transformer.layers.")})
        self.layers = [Layer(W, f"decoder_transformer.transformer.layers.{i}", cfg["num_attention_heads"], context,
                             ring) for i in range(n_layers)]
        self.seanet = [("conv", Conv(W["decoder.model.0.conv.conv.weight"], W["decoder.model.0.conv.conv.bias"]))]
        idx = 1
        for r in cfg["upsampling_ratios"]:
            idx += 1  # ELU
            self.seanet.append(("elu", None))
            self.seanet.append(("convtr", ConvTr(W[f"decoder.model.{idx}.convtr.convtr.weight"],
                                                 W[f"decoder.model.{idx}.convtr.convtr.bias"], r)))
            idx += 1
            self.seanet.append(("res", ResBlock(W, f"decoder.model.{idx}", 1)))  # dilation_growth_rate**0
            idx += 1
        self.seanet.append(("elu", None))
        idx += 1
        self.seanet.append(("conv", Conv(W[f"decoder.model.{idx}.conv.conv.weight"],
                                         W[f"decoder.model.{idx}.conv.conv.bias"])))
        self.got = {}

    def __call__(self, codes):  # codes [F, 8] -> waveform [F*1920]
        W = self.W
        sem = self.emb[0][codes[:, 0]]
        aco = sum(self.emb[k][codes[:, k]] for k in range(1, N_CODEBOOKS))
        q = sem @ W["quantizer.rvq_first.output_proj.weight"][:, :, 0].T + \
            aco @ W["quantizer.rvq_rest.output_proj.weight"][:, :, 0].T
        x = self.up(q)
        self.got.update(semantic_sum=sem, acoustic_sum=aco, quantized=q, upsampled=x)
        for layer in self.layers:
            x = layer(x)
        self.got["transformer"] = x
        for i, (kind, m) in enumerate(self.seanet):
            x = elu(x) if kind == "elu" else m(x)
            self.got[f"decoder_layer_{i}"] = x
        return x[:, 0]


def main():
    ref = json.load(open(os.path.join(ROOT, "reference.json")))
    cfg = ref["config"]
    W = load_safetensors(os.path.join(ROOT, "moshi_format.safetensors"))
    win = cfg["sliding_window"]
    bad = []

    def check(what, a, b, tol):
        d = float(np.abs(a - b).max())
        print(f"  {what:44s} max|diff| {d:.3e}  (bound {tol:g})")
        if not d <= tol:
            bad.append(what)
        return d

    for clip in ref["clips"]:
        codes = np.fromfile(os.path.join(ROOT, clip["codes"]["file"]), "<i4").reshape(clip["codes"]["shape"])
        print(clip["name"], codes.shape)
        dec = Decoder(W, cfg, win)
        wav = dec(codes)
        for k in ("semantic_sum", "acoustic_sum", "quantized", "upsampled"):
            check(k, dec.got[k], f32file(clip[k]), 1e-5)
        check("window: transformer", dec.got["transformer"], f32file(clip["decode_window"]["transformer"]), 1e-5)
        check("window: waveform", wav, f32file(clip["decode_window"]["waveform"]), 1e-4)
        full = Decoder(W, cfg, None)
        wav_full = full(codes)
        check("no window (v5.2.0): transformer", full.got["transformer"],
              f32file(clip["decode_v520"]["transformer"]), 1e-5)
        check("no window (v5.2.0): waveform", wav_full, f32file(clip["decode_v520"]["waveform"]), 1e-4)
        for i, desc in clip.get("decoder_layers", {}).items():
            a = full.got[f"decoder_layer_{int(i)}"]
            check(f"no window: decoder.layers[{i}]", a, f32file(desc), 1e-5 * max(1.0, float(np.abs(a).max())))
        st = Decoder(W, cfg, win)
        wav_st = np.concatenate([st(codes[f:f + 1]) for f in range(codes.shape[0])])
        check("streaming 1 frame/call vs whole clip (f64)", wav_st, wav, 1e-12)
        ring = Decoder(W, cfg, win, ring=True)
        wav_ring = np.concatenate([ring(codes[f:f + 1]) for f in range(codes.shape[0])])
        print(f"  {'moshi ring-cache streaming vs whole clip':44s} max|diff| {float(np.abs(wav_ring - wav).max()):.3e}"
              f"  (not asserted; positions {2 * codes.shape[0]}, window {win})")
    if bad:
        print("FAILED:", ", ".join(bad))
        sys.exit(1)
    print("all checks passed")


main()
