#!/usr/bin/env python3
"""Regenerates tests/data/audio/mimi_tiny: golden fixtures for Kyutai's Mimi DECODER (codes -> 24 kHz waveform), which
LiquidAI/LFM2-Audio-1.5B needs for its speech output (issue 59), made by transformers' own `MimiModel`.

    /usr/bin/python3 tools/audio_reference/make_mimi_fixtures.py [--out tests/data/audio/mimi_tiny]
        [--hf-ref ../shared/tools/hf_reference]

- A tiny random `MimiModel` (save_pretrained, reloaded with from_pretrained and checked bit for bit) with every decoder
  path live: the real upsampling_ratios [8, 6, 5, 4], 24 kHz, 12.5 Hz frames (1920 samples), codebook_size 2048,
  1 semantic + 9 acoustic codebooks of dimension 6 (decode uses the FIRST 8, as LFM2-Audio does), the upsample
  ConvTranspose1d channel-wise (upsample_groups = hidden_size, as the real 512/512), a 2-layer decoder transformer
  with a small sliding_window (5 positions; the decoder transformer runs at 25 Hz, 2 positions per frame), and the
  real kyutai/mimi values of every other switch (causal convs, constant pad, trim_right_ratio 1, compress 2,
  residual kernel 3, dilation growth 2, kernel 7, last kernel 3, LayerNorm eps 1e-5, GELU, RoPE theta 10000, no
  attention bias).
- The same weights are also written under the ORIGINAL moshi checkpoint names (the layout of LFM2-Audio-1.5B's
  tokenizer-e351c8d8-checkpoint125.safetensors): transformers' convert_mimi_checkpoint_to_pytorch.py mapping reversed,
  including its q/k row permutation ("permute for sliced rotary") undone and q/k/v fused back into in_proj_weight.
  The script checks the reversal by running the forward conversion on the result and comparing bit for bit.
- transformers v5.2.0's MimiTransformerModel builds its mask with create_causal_mask (plain causal): the config's
  sliding_window is IGNORED by MimiModel.decode() on a whole clip. moshi (what liquid-audio runs) and transformers
  after commit 7c0a3be0 ("[Mimi] Calibrate ...", 2026-02-20) apply the window. Both references are written:
  `decode_v520` (MimiModel.decode as v5.2.0 computes it) and `decode_window` (the same modules with
  create_causal_mask swapped for transformers' own create_sliding_window_causal_mask, which is what the later commit
  does). See tests/data/audio/mimi_tiny/README.md.
- transformers v5.2.0 from ../shared/tools/hf_reference (`hfenv.setup("5.2.0")` + vl_compat), Debian's
  /usr/bin/python3 (torch 1.13.1), float32, CPU, one thread, eager attention, seeded. Nothing from transformers is
  stored here. Deterministic: two runs give identical files.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "audio", "mimi_tiny"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ap.add_argument("--print-real-names", action="store_true",
                help="print the real kyutai/mimi decoder tensors (transformers name, moshi name, shape) as a Markdown "
                     "table and exit (docs/design/mimi_decoder_research.md)")
ARGS = ap.parse_args()
if not os.path.isdir(ARGS.hf_ref) and os.path.isdir("/work/shared/tools/hf_reference"):  # a git worktree elsewhere
    ARGS.hf_ref = "/work/shared/tools/hf_reference"

sys.path.insert(0, os.path.abspath(ARGS.hf_ref))
import hfenv  # noqa: E402

hfenv.setup("5.2.0")
import vl_compat  # noqa: E402,F401  (transformers' image_utils imports torchvision's NEAREST_EXACT)
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import MimiConfig, MimiModel  # noqa: E402
import transformers.masking_utils as masking_utils  # noqa: E402
import transformers.models.mimi.modeling_mimi as modeling_mimi  # noqa: E402

torch.set_num_threads(1)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TF_COMMIT = "7d9754a05193eb79b1d86aa744b622b8068008cd"  # v5.2.0
SEED = 5911
NUM_DECODE_CODEBOOKS = 8  # LFM2-Audio: 8 Mimi codebooks per audio frame (liquid-audio get_mimi(num_codebooks=8))
SAMPLES_PER_FRAME = 1920  # 24000 / 12.5
CLIPS = [("clip_1", 1, SEED + 1), ("clip_7", 7, SEED + 2), ("clip_14", 14, SEED + 3)]
STAGE_CLIPS = ("clip_1", "clip_7")  # SEANet stage outputs are stored for these only (size)
EMBED_STD = 0.3  # codebook vectors N(0, 0.3^2)
CONV_GAIN = 0.9  # N(0, 0.9^2 / fan_in) conv weights: waveform rms ~0.2
TINY_USAGE_CODES = (0, 1, 2)  # codes whose cluster_usage is below the codebook epsilon (1e-5): the clamp is live

PROVENANCE = {
    "transformers": transformers.__version__,
    "transformers_commit": TF_COMMIT,
    "modeling_file": "src/transformers/models/mimi/modeling_mimi.py @ v5.2.0 (unmodified)",
    "torch": torch.__version__,
    "numpy": np.__version__,
    "python": sys.version.split()[0],
    "dtype": "float32",
    "threads": 1,
    "compat_shims": list(hfenv.COMPAT_SHIMS) + [
        "attn_implementation='eager' (config._attn_implementation before construction, attn_implementation='eager' "
        "on reload): torch 1.13 has no F.scaled_dot_product_attention",
        "decode_window only: modeling_mimi.create_causal_mask temporarily bound to "
        "masking_utils.create_sliding_window_causal_mask (transformers' own function; the change transformers made "
        "in commit 7c0a3be0bbe0d19bdbd1e59259ee06684f05fa58); decode_v520 runs the v5.2.0 code as is",
        "forward hooks observe (never change) quantizer.decode, the semantic/acoustic RVQs, upsample, "
        "decoder_transformer and the SEANet decoder's layers"],
    "generator": "tools/audio_reference/make_mimi_fixtures.py",
}


def build_config():
    # Every switch not named here is MimiConfig's default, which is the kyutai/mimi value (checked in the research
    # note docs/design/mimi_decoder_research.md).
    cfg = MimiConfig(
        sampling_rate=24000, frame_rate=12.5, audio_channels=1,
        hidden_size=32, num_filters=4, num_residual_layers=1, upsampling_ratios=[8, 6, 5, 4],
        kernel_size=7, last_kernel_size=3, residual_kernel_size=3, dilation_growth_rate=2,
        use_causal_conv=True, pad_mode="constant", compress=2, trim_right_ratio=1.0,
        codebook_size=2048, codebook_dim=6, num_quantizers=10, num_semantic_quantizers=1,
        vector_quantization_hidden_dimension=6, use_conv_shortcut=False, upsample_groups=32,
        num_hidden_layers=2, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
        hidden_act="gelu", max_position_embeddings=8000, norm_eps=1e-5, use_cache=False, use_streaming=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, sliding_window=5,
        attention_dropout=0.0, layer_scale_initial_scale=0.01, attention_bias=False, tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    """Seeded weights that keep every activation O(0.1-1): conv / linear weights N(0, g^2 / fan_in) (g = 1 for the
    linears, the quantizer's 1x1 convs and the upsample, CONV_GAIN for the SEANet convs), biases N(0, 0.05^2),
    LayerNorm gains U(0.6, 1.4) and biases N(0, 0.05^2), layer scales U(0.1, 0.6) (the real ones are learnt, not
    0.01), codebooks: usage U(0.5, 3) except TINY_USAGE_CODES (usage 1e-7 .. 3e-6, below the clamp epsilon),
    embed_sum = usage * N(0, EMBED_STD^2) per row."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_scale.scale"):
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.1)
            elif "layernorm" in name and name.endswith(".weight"):
                p.copy_(torch.rand(p.shape, generator=g) * 0.8 + 0.6)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
            elif p.dim() == 3:  # Conv1d [out, in/groups, k]; ConvTranspose1d [in, out/groups, k]
                if _is_convtr(model, name):
                    groups = _module_of(model, name).groups
                    stride = _module_of(model, name).stride[0]
                    fan_in = p.shape[0] // groups * p.shape[2] / stride
                else:
                    fan_in = p.shape[1] * p.shape[2]
                gain = 1.0 if name.startswith("quantizer.") or name == "upsample.conv.weight" else CONV_GAIN
                p.copy_(torch.randn(p.shape, generator=g) * (gain / fan_in ** 0.5))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                raise RuntimeError(f"randomize: no rule for {name} {tuple(p.shape)}")
        for name, b in model.named_buffers():
            if name.endswith("codebook.cluster_usage"):
                usage = torch.rand(b.shape, generator=g) * 2.5 + 0.5
                for i, c in enumerate(TINY_USAGE_CODES):
                    usage[c] = [1e-7, 1e-6, 3e-6][i]
                b.copy_(usage)
                es = dict(model.named_buffers())[name.replace("cluster_usage", "embed_sum")]
                es.copy_(usage[:, None] * torch.randn(es.shape, generator=g) * EMBED_STD)
    for m in model.modules():  # the codebook caches embed = embed_sum / usage on first use
        if isinstance(m, modeling_mimi.MimiEuclideanCodebook):
            m._embed = None


def _module_of(model, pname):
    return model.get_submodule(pname.rsplit(".", 1)[0])


def _is_convtr(model, pname):
    return isinstance(_module_of(model, pname), torch.nn.ConvTranspose1d)


# ------------------------------------------------------------------------------------------------------------------
# The original moshi names: transformers' convert_mimi_checkpoint_to_pytorch.py (convert_list, _convert_model) read
# as facts and reversed. Forward direction (moshi -> HF): substring replacements in list order, then in_proj_weight
# split into q/k/v with q and k rows permuted by `permute` (interleaved-pair RoPE -> rotate-half RoPE).
CONVERT_LIST = [
    ("conv.conv.conv", "conv"), ("convtr.convtr.convtr", "conv"), ("conv.conv", "conv"), ("convtr.convtr", "conv"),
    ("quantizer.rvq_first.vq", "quantizer.semantic_residual_vector_quantizer"),
    ("quantizer.rvq_first", "quantizer.semantic_residual_vector_quantizer"),
    ("quantizer.rvq_rest.vq", "quantizer.acoustic_residual_vector_quantizer"),
    ("quantizer.rvq_rest", "quantizer.acoustic_residual_vector_quantizer"),
    ("_codebook", "codebook"), ("_initialized", "initialized"), ("embedding_sum", "embed_sum"),
    ("encoder.model", "encoder.layers"), ("decoder.model", "decoder.layers"),
    ("encoder_transformer.transformer", "encoder_transformer"),
    ("decoder_transformer.transformer", "decoder_transformer"),
    ("linear1", "mlp.fc1"), ("linear2", "mlp.fc2"), ("self_attn.out_proj", "self_attn.o_proj"),
    ("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm"),
    ("layer_scale_1", "self_attn_layer_scale"), ("layer_scale_2", "mlp_layer_scale"),
]


def hf_to_moshi_name(model, k):
    """The moshi name of HF state-dict key k (the module types decide conv vs convtr nesting depth)."""
    parts = k.split(".")
    owner = ".".join(parts[:-1])
    m = model.get_submodule(owner) if owner else model
    leaf = parts[-1]
    if k.startswith("upsample."):
        return "upsample.convtr.convtr.convtr." + leaf
    if k.startswith("downsample."):
        return "downsample.conv.conv.conv." + leaf
    if isinstance(m, torch.nn.ConvTranspose1d):
        base = owner[: -len(".conv")] + ".convtr.convtr"
        k = base + "." + leaf
    elif isinstance(m, torch.nn.Conv1d) and (k.startswith("encoder.") or k.startswith("decoder.")):
        base = owner[: -len(".conv")] + ".conv.conv"
        k = base + "." + leaf
    rev = [
        ("quantizer.semantic_residual_vector_quantizer.layers", "quantizer.rvq_first.vq.layers"),
        ("quantizer.semantic_residual_vector_quantizer", "quantizer.rvq_first"),
        ("quantizer.acoustic_residual_vector_quantizer.layers", "quantizer.rvq_rest.vq.layers"),
        ("quantizer.acoustic_residual_vector_quantizer", "quantizer.rvq_rest"),
        (".codebook.", "._codebook."), ("._codebook.initialized", "._codebook._initialized"),
        ("._codebook.embed_sum", "._codebook.embedding_sum"),
        ("encoder.layers.", "encoder.model."), ("decoder.layers.", "decoder.model."),
        ("encoder_transformer.layers.", "encoder_transformer.transformer.layers."),
        ("decoder_transformer.layers.", "decoder_transformer.transformer.layers."),
        ("mlp.fc1", "linear1"), ("mlp.fc2", "linear2"), ("self_attn.o_proj", "self_attn.out_proj"),
        ("input_layernorm", "norm1"), ("post_attention_layernorm", "norm2"),
        ("self_attn_layer_scale", "layer_scale_1"), ("mlp_layer_scale", "layer_scale_2"),
    ]
    for a, b in rev:
        k = k.replace(a, b)
    return k


def permute(w, n_heads, dim1, dim2):  # convert_mimi_checkpoint_to_pytorch.permute: interleaved -> rotate-half rows
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def unpermute(w, n_heads, dim1, dim2):  # its inverse: rotate-half rows -> interleaved pairs
    return w.view(n_heads, 2, dim1 // n_heads // 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def to_moshi_state(model, cfg):
    sd = model.state_dict()
    out = {}
    nh, hd = cfg.hidden_size // cfg.head_dim, cfg.head_dim
    for k, v in sd.items():
        if k.endswith("self_attn.q_proj.weight"):
            base = k[: -len("q_proj.weight")]
            q = unpermute(sd[base + "q_proj.weight"], nh, nh * hd, cfg.hidden_size)
            kk = unpermute(sd[base + "k_proj.weight"], cfg.num_key_value_heads, cfg.num_key_value_heads * hd,
                           cfg.hidden_size)
            fused = torch.cat([q, kk, sd[base + "v_proj.weight"]], 0)
            out[hf_to_moshi_name(model, base + "in_proj_weight")] = fused.contiguous()
        elif k.endswith("self_attn.k_proj.weight") or k.endswith("self_attn.v_proj.weight"):
            continue
        else:
            out[hf_to_moshi_name(model, k)] = v.clone().contiguous()
    return out


def moshi_to_hf_state(state, cfg):
    """transformers' _convert_model, restated (the check of the reversal)."""
    hidden, hd = cfg.hidden_size, cfg.head_dim
    nh = hidden // hd
    kvd = cfg.num_key_value_heads * hd
    res = {}
    for k, v in state.items():
        nk = k
        for a, b in CONVERT_LIST:
            if a in nk:
                nk = nk.replace(a, b)
        if "in_proj_weight" in nk:
            d = v.shape[0] // 3
            res[nk.replace("in_proj_weight", "q_proj.weight")] = permute(v[:d], nh, hidden, hidden)
            res[nk.replace("in_proj_weight", "k_proj.weight")] = permute(v[d:2 * d], cfg.num_key_value_heads, kvd,
                                                                         hidden)
            res[nk.replace("in_proj_weight", "v_proj.weight")] = v[2 * d:]
        else:
            res[nk] = v
    return res


# ------------------------------------------------------------------------------------------------------------------
def write_f32(folder, rel, arr):
    a = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
    return _write(folder, rel, a, "float32")


def write_i32(folder, rel, arr):
    a = np.ascontiguousarray(np.asarray(arr, dtype="<i4"))
    return _write(folder, rel, a, "int32")


def _write(folder, rel, a, dtype):
    p = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    b = a.tobytes()
    with open(p, "wb") as f:
        f.write(b)
    return {"file": rel, "dtype": dtype, "shape": list(a.shape), "sha256": hashlib.sha256(b).hexdigest()}


def f32_of(folder, desc):
    return np.fromfile(os.path.join(folder, desc["file"]), "<f4").reshape(desc["shape"])


def sha256_file(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Capture:
    """Observes the decode path: [B, C, T] module outputs are stored time-major [T, C] (batch 1)."""

    def __init__(self, model):
        self.got = {}
        q = model.quantizer
        self._hook(q.semantic_residual_vector_quantizer.output_proj, "semantic_pre_proj", inp=True)
        self._hook(q.semantic_residual_vector_quantizer.output_proj, "semantic_proj")
        self._hook(q.acoustic_residual_vector_quantizer.output_proj, "acoustic_pre_proj", inp=True)
        self._hook(q.acoustic_residual_vector_quantizer.output_proj, "acoustic_proj")
        self._hook(model.upsample, "upsampled")
        model.decoder_transformer.register_forward_hook(
            lambda m, a, o: self.got.__setitem__("transformer", o[0][0].detach().clone()))  # [T, C] already
        # quantized (quantizer.decode's output) = semantic_proj + acoustic_proj: taken as the upsample's input
        model.upsample.register_forward_pre_hook(
            lambda m, a: self.got.__setitem__("quantized", a[0][0].detach().t().clone()))
        for i, layer in enumerate(model.decoder.layers):
            # the last layer (MimiConv1d to 1 channel) is the waveform itself
            if isinstance(layer, (modeling_mimi.MimiConv1d, modeling_mimi.MimiResnetBlock)) and \
                    i != len(model.decoder.layers) - 1:
                self._hook(layer, f"decoder_layer_{i}")

    def _hook(self, module, key, inp=False):
        if inp:
            module.register_forward_pre_hook(lambda m, a: self.got.__setitem__(key, a[0][0].detach().t().clone()))
        else:
            module.register_forward_hook(lambda m, a, o: self.got.__setitem__(key, o[0].detach().t().clone()))


def decode(model, codes, window):
    """MimiModel.decode on codes [frames, 8] (frame-major) -> waveform [frames * 1920]; window=True runs the
    sliding-window mask (create_sliding_window_causal_mask) instead of v5.2.0's create_causal_mask."""
    x = torch.from_numpy(codes.T[None].astype(np.int64))  # [1, 8, frames]
    assert x.shape[1] == NUM_DECODE_CODEBOOKS
    saved = modeling_mimi.create_causal_mask
    if window:
        modeling_mimi.create_causal_mask = masking_utils.create_sliding_window_causal_mask
    try:
        with torch.no_grad():
            out = model.decode(x, return_dict=True)
    finally:
        modeling_mimi.create_causal_mask = saved
    assert out.audio_values.shape == (1, 1, codes.shape[0] * SAMPLES_PER_FRAME), out.audio_values.shape
    return out.audio_values[0, 0]


def make_codes(frames, seed):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 2048, size=(frames, NUM_DECODE_CODEBOOKS)).astype(np.int32)
    # Exercise the codebook clamp (usage < epsilon): frame 0 uses code 0/1/2 in codebooks 0, 1 and 7
    codes[0, 0], codes[0, 1], codes[0, 7] = TINY_USAGE_CODES
    if frames > 3:
        codes[frames // 2, 3] = 2047  # the last row of a codebook
    return codes


def framewise_v520(model, codes, window):
    """transformers v5.2.0's own incremental decode: one frame per MimiModel.decode call with a DynamicCache passed
    as decoder_past_key_values (the only state v5.2.0's decode carries). Returns (transformer rows, waveform)."""
    from transformers.cache_utils import DynamicCache
    saved = modeling_mimi.create_causal_mask
    if window:
        modeling_mimi.create_causal_mask = masking_utils.create_sliding_window_causal_mask
    rows, wav = [], []
    hook = model.decoder_transformer.register_forward_hook(lambda m, a, o: rows.append(o[0][0].detach().clone()))
    try:
        cache = DynamicCache(config=model.config)
        x = torch.from_numpy(codes.T[None].astype(np.int64))
        with torch.no_grad():
            for f in range(codes.shape[0]):
                o = model.decode(x[:, :, f:f + 1], decoder_past_key_values=cache, return_dict=True)
                cache = o.decoder_past_key_values
                wav.append(o.audio_values[0, 0])
    finally:
        hook.remove()
        modeling_mimi.create_causal_mask = saved
    return torch.cat(rows), torch.cat(wav)


def print_real_names():
    """The real model's decoder tensors: MimiConfig defaults are kyutai/mimi's config.json values (frame_rate 12.5
    given explicitly as that file does; num_quantizers 32, the default, is absent from that file)."""
    cfg = MimiConfig(frame_rate=12.5)
    cfg._attn_implementation = "eager"
    model = MimiModel(cfg)
    moshi = to_moshi_state(model, cfg)
    inv = {}
    for k in model.state_dict():
        if ".self_attn.q_proj." in k or ".self_attn.k_proj." in k or ".self_attn.v_proj." in k:
            inv.setdefault(hf_to_moshi_name(model, k.rsplit(".", 2)[0] + ".in_proj_weight"), []).append(k)
        else:
            inv.setdefault(hf_to_moshi_name(model, k), []).append(k)
    print("| moshi name (tokenizer-e351c8d8-checkpoint125.safetensors) | shape | transformers name (kyutai/mimi) |")
    print("|---|---|---|")
    for mk in sorted(moshi):
        if mk.startswith(("encoder.", "encoder_transformer.", "downsample.")) or ".input_proj." in mk:
            continue
        print(f"| `{mk}` | {list(moshi[mk].shape)} | " + ", ".join(f"`{h}` {list(model.state_dict()[h].shape)}"
                                                             for h in inv[mk]) + " |")
    print(f"\n{len(moshi)} tensors in all ({sum(v.numel() for v in moshi.values())} values); encoder side omitted")


def main():
    if ARGS.print_real_names:
        print_real_names()
        return
    out = ARGS.out
    for name in ("config.json", "model.safetensors", "moshi_format.safetensors", "reference.json", "outputs"):
        p = os.path.join(out, name)  # README.md (hand-written) stays
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(SEED)
    cfg = build_config()
    assert cfg.frame_rate == 12.5 and cfg.encodec_frame_rate == 25, (cfg.frame_rate, cfg.encodec_frame_rate)
    model0 = MimiModel(cfg).eval()
    randomize(model0, SEED)
    tmp = tempfile.mkdtemp(prefix="mimi_")
    model0.save_pretrained(tmp)
    model = MimiModel.from_pretrained(tmp, attn_implementation="eager").eval()
    sd_a, sd_b = model0.state_dict(), model.state_dict()
    assert sd_a.keys() == sd_b.keys()
    for k in sd_a:
        assert torch.equal(sd_a[k], sd_b[k]), k
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(tmp, name), os.path.join(out, name))
    shutil.rmtree(tmp)

    # moshi layout, checked by the forward conversion
    moshi = to_moshi_state(model, cfg)
    back = moshi_to_hf_state(dict(moshi), cfg)
    assert set(back) == set(sd_b), (set(back) ^ set(sd_b))
    for k in back:
        assert torch.equal(back[k], sd_b[k]), k
    from safetensors.torch import save_file
    save_file({k: moshi[k] for k in sorted(moshi)}, os.path.join(out, "moshi_format.safetensors"))
    name_map = {}
    for k in sorted(sd_b):
        if ".self_attn.k_proj." in k or ".self_attn.v_proj." in k or ".self_attn.q_proj." in k:
            name_map[k] = hf_to_moshi_name(model, k.rsplit(".", 2)[0] + ".in_proj_weight")
        else:
            name_map[k] = hf_to_moshi_name(model, k)

    cap = Capture(model)
    clips = []
    for name, frames, seed in CLIPS:
        codes = make_codes(frames, seed)
        entry = {"name": name, "frames": frames, "positions_25hz": 2 * frames,
                 "samples": frames * SAMPLES_PER_FRAME,
                 "codes": write_i32(out, f"outputs/{name}.codes.i32", codes)}
        wavs = {}
        for variant, window in (("decode_v520", False), ("decode_window", True)):
            cap.got = {}
            wav = decode(model, codes, window)
            again = decode(model0, codes, window)
            assert torch.equal(wav, again), "reloaded model differs"
            got = dict(cap.got)
            assert torch.isfinite(wav).all() and float(wav.abs().max()) > 1e-3, "flat or non-finite waveform"
            q_sum = got["semantic_proj"] + got["acoustic_proj"]
            assert torch.equal(q_sum, got["quantized"]), "quantized != semantic + acoustic"
            v = {"waveform": write_f32(out, f"outputs/{name}.{variant}.waveform.f32", wav.numpy()),
                 "transformer": write_f32(out, f"outputs/{name}.{variant}.transformer.f32",
                                          got["transformer"].numpy()),
                 "waveform_absmax": float(wav.abs().max()), "waveform_rms": float(wav.pow(2).mean().sqrt())}
            if variant == "decode_v520":
                entry["semantic_sum"] = write_f32(out, f"outputs/{name}.semantic_sum.f32",
                                                  got["semantic_pre_proj"].numpy())
                entry["acoustic_sum"] = write_f32(out, f"outputs/{name}.acoustic_sum.f32",
                                                  got["acoustic_pre_proj"].numpy())
                entry["quantized"] = write_f32(out, f"outputs/{name}.quantized.f32", got["quantized"].numpy())
                entry["upsampled"] = write_f32(out, f"outputs/{name}.upsampled.f32", got["upsampled"].numpy())
                if name in STAGE_CLIPS:
                    entry["decoder_layers"] = {
                        k[len("decoder_layer_"):]: write_f32(out, f"outputs/{name}.{variant}.{k}.f32", t.numpy())
                        for k, t in sorted(got.items(), key=lambda kv: kv[0]) if k.startswith("decoder_layer_")}
            else:
                same = torch.equal(wav, wavs["decode_v520"])
                entry["window_changes_output"] = not same
                entry["max_abs_diff_window_vs_v520"] = float((wav - wavs["decode_v520"]).abs().max())
            wavs[variant] = wav
            entry[variant] = v
        # v5.2.0's incremental decode (recorded, not a reference): its upsample and SEANet decoder keep no state
        # between calls, so frame-by-frame decoding is not the whole-clip decode
        for variant, window in (("decode_v520", False), ("decode_window", True)):
            rows, wav = framewise_v520(model, codes, window)
            ref_rows = torch.from_numpy(f32_of(out, entry[variant]["transformer"]))
            ref_wav = torch.from_numpy(f32_of(out, entry[variant]["waveform"]))
            entry[variant]["v520_framewise_decode_max_abs_diff"] = {
                "transformer": float((rows - ref_rows).abs().max()), "waveform": float((wav - ref_wav).abs().max())}
        if 2 * frames <= cfg.sliding_window:
            assert not entry["window_changes_output"], name
        else:
            assert entry["window_changes_output"], name
        clips.append(entry)

    cfg_saved = json.load(open(os.path.join(out, "config.json")))
    ref = {
        "fixture": "mimi_tiny", "seed": SEED, "provenance": PROVENANCE,
        "what": "tiny random transformers MimiModel (hidden 32, num_filters 4, 10 codebooks of 2048 x 6, 2 decoder "
                "transformer layers, 4 heads x 8, sliding_window 5); MimiModel.decode called with exactly "
                f"{NUM_DECODE_CODEBOOKS} codebooks (codes[:, :8] of a 10-codebook model), as LFM2-Audio does",
        "decode_called_with_codebooks": NUM_DECODE_CODEBOOKS,
        "layout": "every array raw little-endian, C order, time-major: codes [frames, 8] int32 (frame-major; the "
                  "model takes codes.T[None] = [1, 8, frames]); float arrays [T, C] with T the time steps of that "
                  "stage (frames for semantic_sum/acoustic_sum/quantized, 2*frames for upsampled/transformer, "
                  "samples for the waveform [frames*1920])",
        "arrays": {
            "semantic_sum": "codebook 0's embedding (embed_sum / clamp(cluster_usage, 1e-5)) [frames, 6]: the "
                            "semantic RVQ's output_proj INPUT",
            "acoustic_sum": "sum of codebooks 1..7's embeddings [frames, 6]: the acoustic RVQ's output_proj INPUT",
            "quantized": "quantizer.decode(codes) = semantic output_proj(semantic_sum) + acoustic "
                         "output_proj(acoustic_sum) (1x1 convs 6 -> 32, no bias) [frames, 32]",
            "upsampled": "upsample (ConvTranspose1d 32 -> 32, kernel 4, stride 2, groups 32, no bias, causal: the "
                         "last 2 outputs trimmed) [2*frames, 32]",
            "transformer": "decoder_transformer last_hidden_state [2*frames, 32] (per variant)",
            "decoder_layers": "SEANet decoder: output of decoder.layers[i] for every MimiConv1d / MimiResnetBlock "
                              "but the last (= the waveform) (keys = i), [T_i, C_i], clip_1 and clip_7 only, "
                              "decode_v520 variant only",
            "waveform": "MimiModel.decode(...).audio_values[0, 0] [frames*1920] (per variant)"},
        "variants": {
            "decode_v520": "transformers v5.2.0 MimiModel.decode as is: its decoder transformer mask is "
                           "create_causal_mask = plain causal; the config's sliding_window is NOT applied",
            "decode_window": "the same with the sliding window applied (key kv visible to query q iff kv <= q and "
                             "q - kv < sliding_window): moshi's non-streaming decode (liquid-audio, LFM2-Audio) and "
                             "transformers after 7c0a3be0; equal to decode_v520 while 2*frames <= sliding_window"},
        "config": cfg_saved,
        "moshi_format": {
            "file": "moshi_format.safetensors",
            "how": "model.safetensors' tensors under the original moshi names (convert_mimi_checkpoint_to_pytorch"
                   ".py reversed): q/k rows un-permuted to moshi's interleaved-pair RoPE layout and q,k,v "
                   "concatenated into in_proj_weight [3*hidden, hidden]; checked by converting back bit for bit",
            "sha256": sha256_file(os.path.join(out, "moshi_format.safetensors")),
            "hf_to_moshi": name_map},
        "model_sha256": sha256_file(os.path.join(out, "model.safetensors")),
        "tiny_usage_codes": {"codes": list(TINY_USAGE_CODES), "usage": [1e-7, 1e-6, 3e-6],
                             "note": "in every codebook these codes have cluster_usage below epsilon 1e-5, so "
                                     "embed = embed_sum / 1e-5; every clip's frame 0 uses them in codebooks 0, 1, 7"},
        "tolerances": {"waveform_abs": 1e-4, "intermediates_abs": 1e-5,
                       "note": "float32 kernels vs torch's float32 kernels; see README.md"},
        "clips": clips,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print("wrote", out)
    for c in clips:
        print(c["name"], "absmax", c["decode_v520"]["waveform_absmax"], "rms", c["decode_v520"]["waveform_rms"],
              "window diff", c["max_abs_diff_window_vs_v520"])


main()
