#!/usr/bin/env python3
"""Independent float64 NumPy re-reading of tests/data/audio model fixtures: recomputes, from model.safetensors +
config.json + the frontend feature files, every clip's FastConformer encoder output and adapter rows, and the
backbone logits of both prompts, following docs/design/audio_input_research.md §3-§4 op by op (no torch, no
transformers); prints the max abs differences from reference.json.

    /usr/bin/python3 tools/audio_reference/crosscheck_numpy.py [tests/data/audio]
"""
import json
import math
import os
import struct
import sys

import numpy as np

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                           "tests", "data", "audio")
DT = {"F32": np.float32, "I64": np.int64}


def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        d = f.read()
    return {k: np.frombuffer(d[v["data_offsets"][0]:v["data_offsets"][1]], dtype=DT[v["dtype"]]).reshape(v["shape"])
            .astype(np.float64) for k, v in h.items() if k != "__metadata__"}


def f32file(d, desc):
    return np.fromfile(os.path.join(d, desc["file"]), "<f4").reshape(desc["shape"]).astype(np.float64)


def layernorm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def silu(x):
    return x / (1 + np.exp(-x))


def conv2d(x, w, b, stride, groups):
    """x [Cin, H, W], w [Cout, Cin/groups, k, k], padding k//2."""
    cin, H, W_ = x.shape
    cout, cpg, k, _ = w.shape
    p = k // 2
    xp = np.pad(x, ((0, 0), (p, p), (p, p)))
    Ho = (H + 2 * p - k) // stride + 1
    Wo = (W_ + 2 * p - k) // stride + 1
    out = np.zeros((cout, Ho, Wo))
    opg = cout // groups
    for o in range(cout):
        g = o // opg
        for ci in range(cpg):
            src = xp[g * cpg + ci]
            for i in range(k):
                for j in range(k):
                    out[o] += w[o, ci, i, j] * src[i:i + stride * Ho:stride, j:j + stride * Wo:stride]
        out[o] += b[o]
    return out


def encoder(W, c, X):
    P = "model.conformer."
    d, H = c["hidden_size"], c["num_attention_heads"]
    dh = d // H
    x = X[None]                                                     # [1, T, 128]
    x = np.maximum(conv2d(x, W[P + "subsampling.layers.0.weight"], W[P + "subsampling.layers.0.bias"], 2, 1), 0)
    C = x.shape[0]
    x = conv2d(x, W[P + "subsampling.layers.2.weight"], W[P + "subsampling.layers.2.bias"], 2, C)
    x = np.maximum(conv2d(x, W[P + "subsampling.layers.3.weight"], W[P + "subsampling.layers.3.bias"], 1, 1), 0)
    x = conv2d(x, W[P + "subsampling.layers.5.weight"], W[P + "subsampling.layers.5.bias"], 2, C)
    x = np.maximum(conv2d(x, W[P + "subsampling.layers.6.weight"], W[P + "subsampling.layers.6.bias"], 1, 1), 0)
    Tp = x.shape[1]
    x = x.transpose(1, 0, 2).reshape(Tp, -1)                        # index c*F' + f
    x = x @ W[P + "subsampling.linear.weight"].T + W[P + "subsampling.linear.bias"]
    r = np.arange(Tp - 1, -Tp, -1, dtype=np.float64)                # relative positions T'-1 .. -(T'-1)
    om = np.exp(np.arange(0, d, 2) * -(math.log(10000.0) / d))
    pe = np.zeros((2 * Tp - 1, d))
    pe[:, 0::2] = np.sin(r[:, None] * om)
    pe[:, 1::2] = np.cos(r[:, None] * om)
    for i in range(c["num_hidden_layers"]):
        L = f"{P}layers.{i}."
        ff = lambda z, n: silu(z @ W[L + n + ".linear1.weight"].T + W[L + n + ".linear1.bias"]) @ W[L + n + ".linear2.weight"].T + W[L + n + ".linear2.bias"]  # noqa: E731
        x = x + 0.5 * ff(layernorm(x, W[L + "norm_feed_forward1.weight"], W[L + "norm_feed_forward1.bias"]), "feed_forward1")
        z = layernorm(x, W[L + "norm_self_att.weight"], W[L + "norm_self_att.bias"])
        pr = lambda n: (z @ W[L + f"self_attn.{n}.weight"].T + W[L + f"self_attn.{n}.bias"]).reshape(Tp, H, dh).transpose(1, 0, 2)  # noqa: E731
        q, k, v = pr("q_proj"), pr("k_proj"), pr("v_proj")
        p = (pe @ W[L + "self_attn.relative_k_proj.weight"].T).reshape(-1, H, dh).transpose(1, 0, 2)
        u, vb = W[L + "self_attn.bias_u"], W[L + "self_attn.bias_v"]
        ac = np.einsum("hid,hjd->hij", q + u[:, None], k)
        bdr = np.einsum("hid,hpd->hip", q + vb[:, None], p)
        ii, jj = np.meshgrid(np.arange(Tp), np.arange(Tp), indexing="ij")
        bd = bdr[:, ii, (Tp - 1) - ii + jj]
        s = (ac + bd) / math.sqrt(dh)
        s = s - s.max(-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(-1, keepdims=True)
        o = np.einsum("hij,hjd->ihd", a, v).reshape(Tp, d)
        x = x + o @ W[L + "self_attn.o_proj.weight"].T + W[L + "self_attn.o_proj.bias"]
        z = layernorm(x, W[L + "norm_conv.weight"], W[L + "norm_conv.bias"])
        z = z @ W[L + "conv.pointwise_conv1.weight"][:, :, 0].T + W[L + "conv.pointwise_conv1.bias"]
        z = z[:, :d] * (1 / (1 + np.exp(-z[:, d:])))
        kk = W[L + "conv.depthwise_conv.weight"][:, 0, :]
        K = kk.shape[1]
        zp = np.pad(z, ((K // 2, K // 2), (0, 0)))
        z = sum(zp[t:t + Tp] * kk[:, t] for t in range(K)) + W[L + "conv.depthwise_conv.bias"]
        z = (z - W[L + "conv.norm.running_mean"]) / np.sqrt(W[L + "conv.norm.running_var"] + 1e-5) * W[L + "conv.norm.weight"] + W[L + "conv.norm.bias"]
        z = silu(z) @ W[L + "conv.pointwise_conv2.weight"][:, :, 0].T + W[L + "conv.pointwise_conv2.bias"]
        x = x + z
        x = x + 0.5 * ff(layernorm(x, W[L + "norm_feed_forward2.weight"], W[L + "norm_feed_forward2.bias"]), "feed_forward2")
        x = layernorm(x, W[L + "norm_out.weight"], W[L + "norm_out.bias"])
    return x


def adapter(W, h):
    from math import erf
    z = layernorm(h, W["model.audio_adapter_norm.weight"], W["model.audio_adapter_norm.bias"])
    z = z @ W["model.audio_adapter_linear_1.weight"].T + W["model.audio_adapter_linear_1.bias"]
    z = 0.5 * z * (1 + np.vectorize(erf)(z / math.sqrt(2)))
    return z @ W["model.audio_adapter_linear_2.weight"].T + W["model.audio_adapter_linear_2.bias"]


def rms(x, w, eps):
    return w * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def backbone(W, cfg, x):
    """Causal LFM2 on input embeddings x [S, D] (as tools/retrieval_reference/crosscheck_numpy.py); tied logits."""
    P = "model.lfm."
    Hd = cfg["hidden_size"]
    nh, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = Hd // nh
    eps, Lc = cfg["norm_eps"], cfg["conv_L_cache"]
    T = len(x)
    inv = 1.0 / (cfg["rope_parameters"]["rope_theta"] ** (np.arange(0, hd, 2) / hd))
    fr = np.outer(np.arange(T), inv)
    emb = np.concatenate([fr, fr], -1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rot(q):
        return q * cos[:, None, :] + np.concatenate([-q[..., hd // 2:], q[..., :hd // 2]], -1) * sin[:, None, :]
    for i, t in enumerate(cfg["layer_types"]):
        p = f"{P}layers.{i}."
        h = rms(x, W[p + "operator_norm.weight"], eps)
        if t == "conv":
            BCx = h @ W[p + "conv.in_proj.weight"].T
            B, C, xx = BCx[:, :Hd], BCx[:, Hd:2 * Hd], BCx[:, 2 * Hd:]
            Bx = B * xx
            w = W[p + "conv.conv.weight"][:, 0, :]
            out = np.zeros_like(Bx)
            for tt in range(T):
                for k in range(Lc):
                    s = tt - (Lc - 1) + k
                    if s >= 0:
                        out[tt] += w[:, k] * Bx[s]
            y = (C * out) @ W[p + "conv.out_proj.weight"].T
        else:
            q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
            k_ = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, kv, hd)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, kv, hd)
            q = rot(rms(q, W[p + "self_attn.q_layernorm.weight"], eps))
            k_ = rot(rms(k_, W[p + "self_attn.k_layernorm.weight"], eps))
            k_, v = np.repeat(k_, nh // kv, axis=1), np.repeat(v, nh // kv, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k_) / np.sqrt(hd)
            s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
            s = s - s.max(-1, keepdims=True)
            a = np.exp(s)
            a /= a.sum(-1, keepdims=True)
            y = np.einsum("hqk,khd->qhd", a, v).reshape(T, Hd) @ W[p + "self_attn.out_proj.weight"].T
        x = x + y
        h = rms(x, W[p + "ffn_norm.weight"], eps)
        g = h @ W[p + "feed_forward.w1.weight"].T
        x = x + (silu(g) * (h @ W[p + "feed_forward.w3.weight"].T)) @ W[p + "feed_forward.w2.weight"].T
    return rms(x, W[P + "embedding_norm.weight"], eps) @ W[P + "embed_tokens.weight"].T


def main():
    for name in ("lfm2audio_tiny_a", "lfm2audio_tiny_b"):
        d = os.path.join(ROOT, name)
        W = load(os.path.join(d, "model.safetensors"))
        cfg = json.load(open(os.path.join(d, "config.json")))
        r = json.load(open(os.path.join(d, "reference.json")))
        fe = json.load(open(os.path.join(ROOT, "frontend", "reference.json")))
        feats = {c["name"]: f32file(os.path.join(ROOT, "frontend"), c["input_features"]) for c in fe["clips"]}
        we = wa = 0.0
        rows = {}
        for c in r["clips"]:
            h = encoder(W, cfg["encoder"], feats[c["name"]])
            a = adapter(W, h)
            assert h.shape[0] == c["audio_tokens_N"]
            we = max(we, np.abs(h - f32file(d, c["encoder_output"])).max())
            wa = max(wa, np.abs(a - f32file(d, c["adapter_output"])).max())
            rows[c["name"]] = a
        wl = {}
        for key, clipnames in (("prompt", [r["prompt"]["clip"]]), ("pair_prompt", r["pair_prompt"]["clips"])):
            pr = r[key]
            x = W["model.lfm.embed_tokens.weight"][pr["input_ids"]].copy()
            x[pr["audio_positions"]] = np.concatenate([rows[n] for n in clipnames])
            lg = backbone(W, cfg["lfm"], x)
            ref = f32file(d, pr["logits"])
            wl[key] = np.abs(lg - ref).max()
            ok = np.array(pr["argmax_margin_ok"])
            assert (lg.argmax(-1)[ok] == np.array(pr["argmax"])[ok]).all(), f"{name} {key}: argmax differs"
        print(f"{name}: encoder maxdiff {we:.2g}, adapter maxdiff {wa:.2g}, prompt logits maxdiff {wl['prompt']:.2g}, "
              f"pair logits maxdiff {wl['pair_prompt']:.2g}")


if __name__ == "__main__":
    main()
