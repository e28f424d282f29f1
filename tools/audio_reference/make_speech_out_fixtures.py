#!/usr/bin/env python3
"""Regenerates tests/data/audio/lfm2audio_tts_tiny: golden fixtures for the LFM2.5-Audio speech-OUTPUT path (issue 59),
made by the Hugging Face transformers code.

    /usr/bin/python3 tools/audio_reference/make_speech_out_fixtures.py [--out tests/data/audio/lfm2audio_tts_tiny]
        [--hf-ref ../shared/tools/hf_reference] [--overlay $HF_REF_ROOT/overlay/lfm2_audio]

- A tiny random `Lfm2AudioForConditionalGeneration` (save_pretrained, reloaded with from_pretrained and checked bit
  for bit) whose audio-output side is live: 8 codebooks x 2049 codes (Mimi's 2048 + the end-of-audio code 2048),
  a 2-layer depthformer (dim 32), untied audio embeddings, tied depth embeddings.
- Random weights never take a modality switch greedily, so four rows are set after the random init (each a
  minimum-norm solution of a few linear equations; reference.json -> "engineering" says which and why):
  the text embedding row of <|audio_start|> (128, tied to the text output), the text row of <|text_end|> (130),
  and row 2048 of depth_embeddings[0] (tied: codebook 0's end-of-audio embedding and output row).
- Outputs: `generate()` greedy in sequential and interleaved mode (sequences, audio_codes, modalities, and per step
  the backbone hidden state and the margin of every greedy decision), prompt logits for a prompt with an earlier
  spoken turn (modality 3 positions + audio_codes), and the depthformer alone (compute_audio_logits teacher-forced
  logits and _sample_audio_frame greedy codes for given hidden rows).

- transformers v5.2.0 from ../shared/tools/hf_reference (`hfenv.setup("5.2.0")` + vl_compat), Debian's
  /usr/bin/python3 (torch 1.13.1), float32, CPU, one thread, seeded.  models/lfm2_audio/modeling_lfm2_audio.py (newer
  than v5.2.0) laid over the tree unmodified (checked by SHA-256), the config classes restated in
  ./configuration_lfm2_audio.py, as make_audio_fixtures.py does.  Nothing from transformers is stored here.
- torch 1.13 has no F.scaled_dot_product_attention, which the depthformer calls directly: a shim restating it
  (softmax(QK^T * scale + mask) V, torch's is_causal / boolean-mask / enable_gqa semantics) is installed and listed
  in provenance.compat_shims.
- Deterministic: two runs give identical files (checked: see tools/audio_reference/README.md).
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import time

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "audio", "lfm2audio_tts_tiny"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ap.add_argument("--overlay", default=None, help="folder with the upstream lfm2_audio files "
                "(default: $HF_REF_ROOT/overlay/lfm2_audio)")
ARGS = ap.parse_args()
if not os.path.isdir(ARGS.hf_ref) and os.path.isdir("/work/shared/tools/hf_reference"):  # a git worktree elsewhere
    ARGS.hf_ref = "/work/shared/tools/hf_reference"

sys.path.insert(0, os.path.abspath(ARGS.hf_ref))
import hfenv  # noqa: E402

hfenv.setup("5.2.0")
import vl_compat  # noqa: E402,F401  (transformers' image_utils imports torchvision's NEAREST_EXACT)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
import transformers.models as _tm  # noqa: E402

torch.set_num_threads(1)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()


# ------------------------------------------------------------------------------------------------------------------
# torch 1.13 lacks F.scaled_dot_product_attention (torch >= 2.0; enable_gqa >= 2.5).  The depthformer calls it
# directly (Lfm2AudioDepthAttentionCore), with is_causal=True for a full 8-step sequence (compute_audio_logits),
# and with one query over the cached keys (_sample_audio_frame: no mask).  Restated from torch's documented
# reference semantics.
def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p != 0.0:
        raise NotImplementedError("sdpa shim: dropout")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and key.shape[-3] != query.shape[-3]:  # torch: repeat_interleave over the head dimension
        rep = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(rep, dim=-3)
        value = value.repeat_interleave(rep, dim=-3)
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:  # torch: tril(ones(L, S)) (top-left aligned)
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return scores.softmax(dim=-1) @ value


if not hasattr(F, "scaled_dot_product_attention"):
    F.scaled_dot_product_attention = _sdpa
    torch.nn.functional.scaled_dot_product_attention = _sdpa
    hfenv.COMPAT_SHIMS.append(
        "torch.nn.functional.scaled_dot_product_attention (torch>=2.0, enable_gqa >=2.5) restated for torch 1.13 in "
        "tools/audio_reference/make_speech_out_fixtures.py: softmax(Q K^T / sqrt(head_dim) + mask) V in float32, "
        "is_causal = tril(ones(L, S)), boolean attn_mask True = attend, enable_gqa = K/V repeat_interleave over "
        "heads; reached only by the depthformer (Lfm2AudioDepthAttentionCore)")

# ------------------------------------------------------------------------------------------------------------------
# The lfm2_audio modeling file (newer than v5.2.0) laid over the v5.2.0 tree, as in make_audio_fixtures.py
TF_COMMIT = "7d9754a05193eb79b1d86aa744b622b8068008cd"  # v5.2.0
MODELING = ("src/transformers/models/lfm2_audio/modeling_lfm2_audio.py", "0945703d90e43063d0522af9af2a2d408b998adc",
            "1d399b775b4f83ea6e0fae3bfaa6f4ced5df93aa5b94fb2bfed09d9bbcd47ff4")
CONFIG_PORT = ("src/transformers/models/lfm2_audio/configuration_lfm2_audio.py",
               "commit not reported by the search tool (find_string id 59875036439, 16 698 chars; the version with "
               "tie_audio_embeddings, Lfm2AudioPreprocessorConfig and Lfm2AudioEncoderConfig)")


def sha256_file(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def lay_over_lfm2_audio():
    src = ARGS.overlay or os.path.join(hfenv.HF_ROOT, "overlay", "lfm2_audio")
    tmp = tempfile.mkdtemp(prefix="lfm2audio_tts_")
    pkg = os.path.join(tmp, "lfm2_audio")
    os.makedirs(pkg)
    p = os.path.join(src, "modeling_lfm2_audio.py")
    if not os.path.isfile(p) or sha256_file(p) != MODELING[2]:
        sys.exit(f"{p}: missing or not the upstream file ({MODELING[1]}); see tools/audio_reference/README.md")
    shutil.copy(p, pkg)
    shutil.copy(os.path.join(HERE, "configuration_lfm2_audio.py"), pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:  # shim: an empty package file (no lazy-module table)
        f.write("")
    _tm.__path__.append(tmp)  # -> transformers.models.lfm2_audio
    return tmp


_OVERLAY_TMP = lay_over_lfm2_audio()
from transformers.models.lfm2_audio.configuration_lfm2_audio import Lfm2AudioConfig  # noqa: E402
from transformers.models.lfm2_audio.modeling_lfm2_audio import Lfm2AudioForConditionalGeneration  # noqa: E402

SHIMS = list(hfenv.COMPAT_SHIMS) + [
    "models/lfm2_audio laid over the v5.2.0 tree: a temporary package folder appended to transformers.models.__path__ "
    "(upstream modeling_lfm2_audio.py byte for byte) with an EMPTY __init__.py (the upstream lazy-module __init__ is "
    "not used)",
    "Lfm2AudioConfig / Lfm2AudioDepthConfig / Lfm2AudioEncoderConfig / Lfm2AudioPreprocessorConfig: the upstream "
    "@strict dataclasses restated in v5.2.0 keyword style (tools/audio_reference/configuration_lfm2_audio.py; same "
    "fields, defaults, checks and derived values)",
    "attn_implementation='eager' forced on the whole model (set_attn_implementation after construction, "
    "attn_implementation='eager' on reload): torch 1.13 has no F.scaled_dot_product_attention for the backbone",
    "generate() and _sample_audio_frame() observed, not changed: a forward hook on model.model.lfm records each "
    "step's last hidden row, a forward hook on depth_embeddings[c].embedding_norm records the normed depth output, "
    "and an instance attribute wrapping the static _sample records each decision's logits (it returns the "
    "original's result)",
]
PROVENANCE = {
    "transformers": transformers.__version__,
    "transformers_commit": TF_COMMIT,
    "laid_over": [{"file": MODELING[0], "commit": MODELING[1], "sha256": MODELING[2], "use": "unmodified"},
                  {"file": CONFIG_PORT[0], "commit": CONFIG_PORT[1], "use": "ported to v5.2.0 keyword style: "
                   "tools/audio_reference/configuration_lfm2_audio.py"}],
    "torch": torch.__version__,
    "numpy": np.__version__,
    "python": sys.version.split()[0],
    "dtype": "float32",
    "threads": 1,
    "compat_shims": SHIMS,
    "generator": "tools/audio_reference/make_speech_out_fixtures.py",
}

# ------------------------------------------------------------------------------------------------------------------
# JSON / binary writers (the layout of make_audio_fixtures.py's)


def f32json(x):
    a = np.asarray(x, dtype=np.float32)
    if a.ndim == 0:
        return float(f"{float(a):.9g}")
    return [f32json(v) for v in a]


def _dumps(o, ind=0):
    """dicts one key per line; lists of scalars on one line; a list of lists one row per line."""
    def scalar(x):
        return not isinstance(x, (dict, list))
    if isinstance(o, dict):
        if not o:
            return "{}"
        pad = " " * (ind + 1)
        return "{\n" + ",\n".join(pad + json.dumps(k) + ": " + _dumps(v, ind + 1) for k, v in o.items()) + "\n" + " " * ind + "}"
    if isinstance(o, list) and o and not all(scalar(x) for x in o):
        pad = " " * (ind + 1)
        return "[\n" + ",\n".join(pad + _dumps(v, ind + 1) for v in o) + "\n" + " " * ind + "]"
    if isinstance(o, list):
        return "[" + ",".join(json.dumps(x, ensure_ascii=False) for x in o) + "]"
    return json.dumps(o, ensure_ascii=False)


def write_json(path, obj):
    s = _dumps(obj)
    json.loads(s)
    with open(path, "w", encoding="utf-8") as f:
        f.write(s)
        f.write("\n")


def write_bin(folder, rel, arr, dtype, what):
    a = np.ascontiguousarray(np.asarray(arr, dtype=dtype))
    p = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    b = a.tobytes()
    with open(p, "wb") as f:
        f.write(b)
    assert np.array_equal(np.fromfile(p, dtype=dtype).reshape(a.shape), a, equal_nan=True)
    return {"file": rel, "dtype": {"<f4": "float32", "<i4": "int32"}[dtype], "byte_order": "little",
            "shape": list(a.shape), "what": what, "sha256": hashlib.sha256(b).hexdigest()}


def read_safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    meta = h.pop("__metadata__", None)
    return {k: {"dtype": v["dtype"], "shape": v["shape"]} for k, v in sorted(h.items())}, meta


# ------------------------------------------------------------------------------------------------------------------
# The model.  Token ids: BOS/<|im_start|>/<|im_end|>/128/130/133 are the real LFM2(.5)-Audio ids; the rest notional.
BOS, IM_START, IM_END, NL = 1, 6, 7, 10
AUDIO_START, TEXT_END, AUDIO_IN = 128, 130, 133
ROLE = {"system": [200, 201], "user": [202], "assistant": [203]}  # notional role-name ids (each + NL)
VOCAB = 256
CODEBOOKS, AUDIO_VOCAB, AUDIO_EOS = 8, 2049, 2048
SEED = 5901
MARGIN = 2.0        # the engineered logit wins by this much over the best other candidate
MIN_MARGIN = 1e-3   # every recorded greedy decision must win by at least this (else the fixture is rejected)


def build_config():
    enc = dict(model_type="parakeet_encoder", num_mel_bins=128, conv_kernel_size=9, subsampling_factor=8,
               subsampling_conv_kernel_size=3, subsampling_conv_stride=2, hidden_act="silu", attention_bias=True,
               convolution_bias=True, dropout=0.0, dropout_positions=0.0, layerdrop=0.0, activation_dropout=0.0,
               attention_dropout=0.0, max_position_embeddings=5000, scale_input=False, hidden_size=32,
               num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, subsampling_conv_channels=4)
    lfm = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=128000, norm_eps=1e-5, conv_L_cache=3, pad_token_id=0, bos_token_id=BOS,
               eos_token_id=IM_END, tie_word_embeddings=True,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, block_multiple_of=32,
               layer_types=["conv", "full_attention", "conv", "full_attention"], intermediate_size=128)
    depth = dict(layers=2, dim=32, num_attention_heads=4, num_key_value_heads=2, tie=True, rope_theta=1000000.0)
    return Lfm2AudioConfig(encoder=enc, lfm=lfm, depthformer=depth, codebooks=CODEBOOKS, audio_vocab_size=AUDIO_VOCAB,
                           audio_eos_token_id=AUDIO_EOS, tie_audio_embeddings=False, interleaved_n_text=6,
                           interleaved_n_audio=12, audio_start_token_id=AUDIO_START, text_end_token_id=TEXT_END)


def randomize_model(model, seed):
    """Every parameter and BatchNorm statistic drawn from a seeded generator so that no operator is an identity
    (as make_audio_fixtures.py): weights N(0, 1/fan_in), biases N(0, 0.1^2) (depth_linear's included), norm gains
    U(0.5, 1.5), rel-pos biases N(0, 0.2^2), token / audio / depth embeddings N(0, 1) (text row 0 = <|pad|> zero),
    BatchNorm running_mean N(0, 0.5^2), running_var U(0.5, 2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias_u") or name.endswith("bias_v"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            elif p.dim() == 1 and ("norm" in name or "layernorm" in name) and name.endswith(".weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
                p[0].zero_()
            elif name.endswith("embedding.weight") or name.endswith("emb.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            else:
                raise RuntimeError(f"randomize_model: no rule for {name} {tuple(p.shape)}")
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.5)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) * 1.5 + 0.5)


# ------------------------------------------------------------------------------------------------------------------
# Prompts (notional text ids in 140..255, never 128/130/133)
def notional(rng, n):
    return [int(v) for v in rng.integers(140, 256, n)]


def chat(system, turns):
    """<|startoftext|><|im_start|>system\\n{system}<|im_end|>\\n then per turn <|im_start|>{role}\\n{ids}<|im_end|>\\n,
    then <|im_start|>assistant\\n."""
    ids = [BOS, IM_START] + ROLE["system"] + [NL] + system + [IM_END, NL]
    for role, body in turns:
        ids += [IM_START] + ROLE[role] + [NL] + body + [IM_END, NL]
    return ids + [IM_START] + ROLE["assistant"] + [NL]


def make_prompts():
    rng = np.random.default_rng(5902)
    tts_uk_male = notional(rng, 9)     # stands for "Perform TTS. Use the UK male voice."
    tts_us_female = notional(rng, 9)   # stands for "Perform TTS. Use the US female voice."
    interleaved = notional(rng, 7)     # stands for "Respond with interleaved text and audio."
    p = {}
    p["seq_a"] = chat(tts_uk_male, [("user", notional(rng, 11))])
    p["seq_e"] = chat(tts_us_female, [("user", notional(rng, 4))])
    p["inter_b"] = chat(interleaved, [("user", notional(rng, 8))])
    p["inter_b2"] = chat(interleaved, [("user", notional(rng, 5))])
    # an earlier spoken turn (sequential): assistant text, <|audio_start|>, 9 frames + the end frame, text, <|im_end|>
    n_frames = 10
    head = chat(tts_uk_male, [("user", notional(rng, 6))])
    turn = notional(rng, 2) + [AUDIO_START]
    spoken_at = len(head) + len(turn)
    tail = (notional(rng, 1) + [IM_END, NL, IM_START] + ROLE["user"] + [NL] + notional(rng, 5)
            + [IM_END, NL, IM_START] + ROLE["assistant"] + [NL])
    ids = head + turn + [0] * n_frames + tail
    modality = [1] * len(ids)
    for i in range(spoken_at, spoken_at + n_frames):
        modality[i] = 3
    codes = rng.integers(0, 2048, (CODEBOOKS, n_frames))
    codes[:, -1] = AUDIO_EOS
    p["spoken_c"] = {"ids": ids, "modality_ids": modality, "audio_codes": codes.tolist(), "first_audio_position":
                     spoken_at, "frames": n_frames}
    for k in ("seq_a", "seq_e", "inter_b", "inter_b2"):
        assert AUDIO_START not in p[k] and TEXT_END not in p[k] and AUDIO_IN not in p[k]
    return p


# ------------------------------------------------------------------------------------------------------------------
# Observing generate(): the hidden row of every backbone step, the normed depth output of every codebook step and the
# logits of every greedy decision.  Nothing in the computation changes.
class Trace:
    def __init__(self, model):
        self.hidden, self.decisions = [], []
        self.normed = [[] for _ in range(CODEBOOKS)]
        model.model.lfm.register_forward_hook(self._lfm)
        for c, emb in enumerate(model.model.depth_embeddings):
            emb.embedding_norm.register_forward_hook(lambda m, i, o, c=c: self.normed[c].append(o.detach().clone()))
        orig = type(model)._sample

        def sample(logits, temperature, top_k):
            self.decisions.append(logits.detach().clone())
            return orig(logits, temperature=temperature, top_k=top_k)
        model._sample = sample

    def _lfm(self, mod, inp, out):
        self.hidden.append(out.last_hidden_state[0, -1].detach().clone())

    def reset(self):
        self.hidden, self.decisions = [], []
        self.normed = [[] for _ in range(CODEBOOKS)]


def margin(row):
    """top-1 minus top-2 of one logits row."""
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


@torch.no_grad()
def run_generate(model, trace, ids, mode, max_new, modality_ids=None, audio_codes=None):
    trace.reset()
    kw = {}
    if modality_ids is not None:
        kw = dict(modality_ids=torch.tensor([modality_ids]), audio_codes=torch.tensor([audio_codes]))
    out = model.generate(input_ids=torch.tensor([ids]), generation_mode=mode, max_new_tokens=max_new, **kw)
    mods = out.modalities[0].tolist()
    dec = list(trace.decisions)
    frame_margins, text_margins = [], []
    k = 0
    for m in mods:  # text: one decision; audio: CODEBOOKS decisions (the end frame's 1..7 are computed, then discarded)
        if m == 1:
            text_margins.append(margin(dec[k]))
            k += 1
        else:
            frame_margins.append([margin(d) for d in dec[k:k + CODEBOOKS]])
            k += CODEBOOKS
    stopped_by_eos_unyielded = k < len(dec)  # interleaved: <|im_end|> decided but not yielded
    assert k + (1 if stopped_by_eos_unyielded else 0) == len(dec)
    return {"sequences": out.sequences[0].tolist(), "audio_codes": out.audio_codes[0].tolist(), "modalities": mods,
            "hidden": torch.stack(trace.hidden), "decisions": dec, "text_margins": text_margins,
            "frame_margins": frame_margins, "normed0": list(trace.normed[0]),
            "eos_unyielded": stopped_by_eos_unyielded}


def step_of_frame(mods, frame):
    """generate()'s step index (= index into modalities and hidden rows) of the frame-th audio frame."""
    return [i for i, m in enumerate(mods) if m == 3][frame]


@torch.no_grad()
def prompt_hidden(model, ids):
    return model.model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]


@torch.no_grad()
def set_row(weight, row, vectors, what, against=()):
    """weight[row] = the minimum-norm e with v . e = max_{j != row}(v . weight[j]) + MARGIN for every v in `vectors`
    and the same - MARGIN for every v in `against`: `row` becomes the greedy choice where each v is the (normed)
    input of the output projection, and stays out of it at the `against` rows; nothing else in the model changes."""
    V = torch.stack(list(vectors) + list(against)).double()
    W = weight.detach().double()
    others = V @ W.T
    others[:, row] = -float("inf")
    sign = torch.tensor([1.0] * len(vectors) + [-1.0] * len(against), dtype=torch.float64)
    t = others.max(dim=1).values + sign * MARGIN
    e = V.T @ torch.linalg.solve(V @ V.T, t)
    weight[row] = e.float()
    return {"row": row, "what": what, "equations": len(vectors) + len(against), "row_norm": f32json(e.norm()),
            "targets": f32json(t.numpy())}


def engineer(model, trace, prompts):
    """Sets the rows that make greedy decoding switch modality (see the module docstring); returns how."""
    E = model.model.lfm.embed_tokens.weight          # tied: text embedding = text output row
    D0 = model.model.depth_embeddings[0].embedding.weight  # tied: codebook 0 embedding = codebook 0 output row
    log = []
    # (1) <|audio_start|> after the two TTS prompts: the prompt-end hidden rows do not depend on row 128
    log.append(set_row(E, AUDIO_START, [prompt_hidden(model, prompts[k]) for k in ("seq_a", "seq_e")],
                       "text row 128 (<|audio_start|>): the greedy text after the seq_a and seq_e prompts (by "
                       "MARGIN), and MARGIN below the greedy text after the inter_b and inter_b2 prompts (all four "
                       "prompts end with the same '<|im_start|>assistant\\n' ids, so their last hidden rows are alike)",
                       against=[prompt_hidden(model, prompts[k]) for k in ("inter_b", "inter_b2")]))
    # (2) <|text_end|> at interleaved step INTER_TEXT_END_STEP of inter_b2 (a text step: the second text run)
    r = run_generate(model, trace, prompts["inter_b2"], "interleaved", INTER_TEXT_END_STEP + 1)
    assert r["modalities"][INTER_TEXT_END_STEP] == 1
    log.append(set_row(E, TEXT_END, [r["hidden"][INTER_TEXT_END_STEP]],
                       f"text row 130 (<|text_end|>): the greedy text at inter_b2 step {INTER_TEXT_END_STEP}"))
    # (3) the end-of-audio code as codebook 0's greedy choice at chosen frames (row 2048 is neither fed back nor
    # chosen before them: checked afterwards)
    vs = []
    for key, mode, max_new, frame in END_FRAMES:
        r = run_generate(model, trace, prompts[key], mode, max_new)
        vs.append(r["normed0"][frame])
    log.append(set_row(D0, AUDIO_EOS, vs, "depth_embeddings[0] row 2048 (end of audio; embedding = output row): "
                       "codebook 0's greedy code at " + ", ".join(f"{k} audio frame {f}" for k, _, _, f in END_FRAMES)))
    return log


# Which decisions are engineered (checked after the last edit, on the reloaded checkpoint)
INTER_TEXT_END_STEP = 19   # inter_b2: text steps 0-5, audio 6-17, text 18.. -> <|text_end|> at 19
# (prompt, mode, max_new_tokens, audio frame whose codebook 0 is the end code); inter_b2: frames 0-11 are the first
# audio run (steps 6-17), frame 12 is step 20 (after <|text_end|> at 19), so frame 17 = step 25
END_FRAMES = [("seq_a", "sequential", 32, 5), ("seq_e", "sequential", 24, 3), ("inter_b2", "interleaved", 30, 17)]


def new_model(seed):
    torch.manual_seed(seed)
    model = Lfm2AudioForConditionalGeneration(build_config()).eval()
    randomize_model(model, seed)
    model.set_attn_implementation("eager")  # torch 1.13 has no F.scaled_dot_product_attention
    return model


def summary(r):
    mods = r["modalities"]
    runs, cur, n = [], None, 0
    for m in mods:
        if m != cur and cur is not None:
            runs.append(("T" if cur == 1 else "A") + str(n))
            n = 0
        cur, n = m, n + 1
    if cur is not None:
        runs.append(("T" if cur == 1 else "A") + str(n))
    return " ".join(runs)


# ------------------------------------------------------------------------------------------------------------------
# The scenarios: (name, prompt key, generation_mode, max_new_tokens)
GENERATE = [("seq_a", "seq_a", "sequential", 32), ("seq_e", "seq_e", "sequential", 24),
            ("inter_b", "inter_b", "interleaved", 60), ("inter_b2", "inter_b2", "interleaved", 30)]
SPOKEN_MAX_NEW = 16
DEPTH_ROWS = [("seq_a", 0), ("seq_a", 1), ("seq_a", 5)]  # (run, audio frame): the hidden row that decided it


SCENARIOS = {
    "generate.seq_a": "sequential greedy after a TTS prompt (35 ids): <|audio_start|> (engineered), 6 audio frames "
                      "whose last is the end frame (codebook 0 = 2048 engineered at frame 5), then 25 text tokens "
                      "(max_new_tokens 32 reached)",
    "generate.seq_e": "the same from a shorter TTS prompt (28 ids; for batching with seq_a): <|audio_start|>, 4 frames "
                      "(end at frame 3), 19 text tokens (max_new_tokens 24)",
    "generate.inter_b": "interleaved greedy, nothing engineered on its path: runs of 6 text tokens and 12 frames by "
                        "count alone (max_new_tokens 60); no <|text_end|>, no end-of-audio",
    "generate.inter_b2": "interleaved greedy with <|text_end|> (engineered) as the 2nd token of the 2nd text run "
                         "(step 19), then audio until the end frame (frame 17 = step 25, engineered), one text "
                         "token, and audio again at once (text is done): runs T6 A12 T2 A6 T1 A3 (max_new_tokens 30)",
    "spoken_c": "a prompt with an earlier spoken assistant turn: 10 modality-3 positions (9 random frames of codes "
                "0..2047 and the end frame, all 2048) whose embeddings are the sums of their 8 codes' audio "
                "embeddings; text logits at every position, then a sequential greedy continuation (not engineered: "
                "it happens to start speaking, <|audio_start|> + 15 frames, max_new_tokens 16)",
    "depth": "the depthformer alone on 4 backbone rows (seq_a frames 0, 1, 5 and a random row): _sample_audio_frame "
             "greedy codes + its per-step logits, and compute_audio_logits (teacher-forced) with labels = those "
             "greedy codes for rows 0-2 (so both paths agree to ~1e-5) and random labels (one 2048) for row 3",
}
GENERATE_SEMANTICS = [
    "batch 1; step i runs the backbone on one new embedding (the prompt at step 0) and its last hidden row decides "
    "step i; `hidden` row i is that row",
    "text step: logits = hidden @ embed_tokens^T (tied), argmax; the token is yielded (in `sequences`) and fed back "
    "as its text embedding. Sequential: <|audio_start|> (128) is yielded, then every step is an audio frame until "
    "an end frame. <|im_end|> (7) ends generation: yielded in sequential mode, NOT yielded in interleaved mode",
    "audio step (frame): depth_linear(hidden) -> [8, 32]; codebook c (0..7) runs the depthformer on "
    "depth_linear[c] + embedding_c-1(code_c-1) (0 for c = 0) with a KV cache over the frame's earlier codebooks, "
    "logits = depth_embeddings[c].to_logits(embedding_norm(out)), argmax. If code 0 is 2048 the whole frame is "
    "replaced by 2048 x 8 (the end frame, still yielded: a column of `audio_codes`, modality 3) and text follows. "
    "The frame is fed back as sum_c audio_embedding.embedding[c * 2049 + code_c]",
    "interleaved: a counter starts at interleaved_n_text (6) and drops by one at EVERY step before its decision; a "
    "text step that leaves it at 0, or the token <|text_end|> (130, yielded), switches to audio with the counter at "
    "interleaved_n_audio (12); an audio step that leaves it at 0 switches back to text (counter 6) unless "
    "<|text_end|> has been seen; an end frame always switches to text. After <|text_end|> every text step switches "
    "straight back to audio (inter_b2's last T1 A3)",
    "modalities: 1 = text step, 3 = audio frame, one entry per yielded item, in order",
]


def expected_runs():
    """The modality pattern each engineered run must take (T = text steps, A = audio frames)."""
    return {"seq_a": "T1 A6 T25", "seq_e": "T1 A4 T19", "inter_b": "T6 A12 T6 A12 T6 A12 T6",
            "inter_b2": "T6 A12 T2 A6 T1 A3"}


@torch.no_grad()
def run_all(model, trace, prompts):
    res = {}
    for name, key, mode, max_new in GENERATE:
        res[name] = run_generate(model, trace, prompts[key], mode, max_new)
    c = prompts["spoken_c"]
    o = model(input_ids=torch.tensor([c["ids"]]), modality_ids=torch.tensor([c["modality_ids"]]),
              audio_codes=torch.tensor([c["audio_codes"]]))
    res["spoken_c_logits"] = o.logits[0].clone()
    res["spoken_c"] = run_generate(model, trace, c["ids"], "sequential", SPOKEN_MAX_NEW, c["modality_ids"],
                                   c["audio_codes"])
    # the depthformer alone: hidden rows of seq_a's frames + one random row, greedy codes, teacher-forced logits
    g = torch.Generator().manual_seed(5903)
    if any(sum(m == 3 for m in res[r]["modalities"]) <= f for r, f in DEPTH_ROWS):
        res["depth"] = None  # check() reports the broken run
        return res
    rows = [res[r]["hidden"][step_of_frame(res[r]["modalities"], f)] for r, f in DEPTH_ROWS]
    rows.append(torch.randn(model.config.hidden_size, generator=g).to(res[DEPTH_ROWS[0][0]]["hidden"].dtype))
    hidden = torch.stack(rows)
    trace.reset()
    greedy = torch.stack([model._sample_audio_frame(h, temperature=None, top_k=None) for h in hidden])
    depth_margins = [[margin(d) for d in trace.decisions[i * CODEBOOKS:(i + 1) * CODEBOOKS]] for i in range(len(rows))]
    incremental = torch.stack(trace.decisions).view(len(rows), CODEBOOKS, AUDIO_VOCAB)
    labels = greedy.clone()
    labels[-1] = torch.randint(0, AUDIO_VOCAB, (CODEBOOKS,), generator=g)
    labels[-1, 3] = AUDIO_EOS  # an end-of-audio code as a teacher-forced input inside the frame
    logits = model.compute_audio_logits(hidden, labels)
    res["depth"] = {"hidden": hidden, "greedy": greedy, "labels": labels, "logits": logits, "margins": depth_margins,
                    "incremental_logits": incremental}
    return res


def check(res):
    """Everything the fixture promises; returns the broken promises."""
    bad = []
    for name, pattern in expected_runs().items():
        r = res[name]
        if summary(r) != pattern:
            bad.append(f"{name}: modality runs {summary(r)} != {pattern}")
            continue
        cb0 = r["audio_codes"][0]
        ends = [i for i, v in enumerate(cb0) if v == AUDIO_EOS]
        want = {"seq_a": [5], "seq_e": [3], "inter_b": [], "inter_b2": [17]}[name]
        if ends != want:
            bad.append(f"{name}: end-of-audio frames {ends} != {want}")
        texts = r["sequences"]
        if name.startswith("seq") and (texts[0] != AUDIO_START or AUDIO_START in texts[1:]):
            bad.append(f"{name}: <|audio_start|> not exactly the first text token: {texts}")
        if name.startswith("inter") and AUDIO_START in texts[:1]:
            bad.append(f"{name}: starts with <|audio_start|>")
        t_end = [i for i, v in enumerate(texts) if v == TEXT_END]
        if t_end != ({"inter_b2": [7]}.get(name, [])):
            bad.append(f"{name}: <|text_end|> at text indices {t_end}")
        if IM_END in texts:
            bad.append(f"{name}: <|im_end|> generated (the run would end early)")
    for name in [n for n, *_ in GENERATE] + ["spoken_c"]:
        r = res[name]
        m = min(r["text_margins"] + [f[0] if c == AUDIO_EOS else min(f)
                                     for f, c in zip(r["frame_margins"], r["audio_codes"][0])])
        if m < MIN_MARGIN:
            bad.append(f"{name}: a greedy decision wins by {m:.3g} < {MIN_MARGIN}")
    m = min(min(x) for x in res["depth"]["margins"]) if res["depth"] else 0.0
    if m < MIN_MARGIN:
        bad.append(f"depth: a greedy decision wins by {m:.3g} < {MIN_MARGIN}")
    return bad


def same(a, b):
    """Bitwise equality of two run_all results."""
    for k in a:
        if k == "depth":
            if not all(torch.equal(a[k][j], b[k][j]) for j in ("hidden", "greedy", "labels", "logits")):
                return False
        elif isinstance(a[k], torch.Tensor):
            if not torch.equal(a[k], b[k]):
                return False
        elif any(a[k][j] != b[k][j] for j in ("sequences", "audio_codes", "modalities")) \
                or not torch.equal(a[k]["hidden"], b[k]["hidden"]):
            return False
    return True


# ------------------------------------------------------------------------------------------------------------------
def gen_record(d, name, r, ids, mode, max_new, text_logits=True, frame_logits=False):
    frames = len(r["audio_codes"][0])
    rec = {"prompt_ids": ids, "prompt_length": len(ids), "generation_mode": mode, "max_new_tokens": max_new,
           "runs": summary(r),
           "sequences": r["sequences"], "audio_codes": r["audio_codes"], "modalities": r["modalities"],
           "audio_frames": frames,
           "end_of_audio_frames": [i for i, v in enumerate(r["audio_codes"][0]) if v == AUDIO_EOS],
           "text_margins": f32json(r["text_margins"]),
           "frame_margins": [f32json(f) for f in r["frame_margins"]],
           "hidden": write_bin(d, f"outputs/{name}_hidden.f32", r["hidden"].numpy(), "<f4",
                               "the backbone's last hidden row (after its final norm) at every generate() step: row "
                               "i decided step i (text: logits = row @ embed_tokens^T; audio: the depthformer's "
                               "input); row 0 is the prompt's last position")}
    dec = r["decisions"]
    text = [dec_i for dec_i in dec if dec_i.shape[-1] == VOCAB]
    audio = [dec_i for dec_i in dec if dec_i.shape[-1] == AUDIO_VOCAB]
    if text_logits:
        rec["text_logits"] = write_bin(d, f"outputs/{name}_text_logits.f32", torch.stack(text).numpy(), "<f4",
                                       "the text logits of every text step, in order (with interleaved mode's "
                                       "unyielded <|im_end|> decision, if any, last)")
    if frame_logits:  # 393 KB for seq_a; the other runs' would add 4 MB
        rec["frame_logits"] = write_bin(d, f"outputs/{name}_frame_logits.f32",
                                        torch.stack(audio).view(frames, CODEBOOKS, AUDIO_VOCAB).numpy(), "<f4",
                                        "the depthformer's logits of every codebook step of every frame (the end "
                                        "frame's codebooks 1..7 are computed by generate() and then replaced by 2048)")
    return rec


def float64_diffs(a, b):
    """max |float32 - float64| per output kind, over every run; and whether every decision came out the same."""
    def md(x, y):
        return float((x.double() - y).abs().max())
    d = {"same_decisions": all(a[k]["sequences"] == b[k]["sequences"] and a[k]["audio_codes"] == b[k]["audio_codes"]
                               for k in [n for n, *_ in GENERATE] + ["spoken_c"])
         and torch.equal(a["depth"]["greedy"], b["depth"]["greedy"])}
    if not d["same_decisions"]:
        return d
    runs = [n for n, *_ in GENERATE] + ["spoken_c"]
    d["hidden"] = max(md(a[k]["hidden"], b[k]["hidden"]) for k in runs)
    d["text_logits"] = max(md(x, y) for k in runs for x, y in zip(a[k]["decisions"], b[k]["decisions"])
                           if x.shape[-1] == VOCAB)
    d["frame_logits"] = max(md(x, y) for k in runs for x, y in zip(a[k]["decisions"], b[k]["decisions"])
                            if x.shape[-1] == AUDIO_VOCAB)
    d["prompt_logits"] = md(a["spoken_c_logits"], b["spoken_c_logits"])
    d["depth_teacher_forced_logits"] = md(a["depth"]["logits"], b["depth"]["logits"])
    return {k: (f32json(v) if isinstance(v, float) else v) for k, v in d.items()}


def main():
    t0 = time.time()
    out = os.path.abspath(ARGS.out)
    prompts = make_prompts()
    rejected = []
    for attempt in range(40):
        seed = SEED + attempt
        model = new_model(seed)
        trace = Trace(model)
        engineering = engineer(model, trace, prompts)
        res = run_all(model, trace, prompts)
        bad = check(res)
        print(f"seed {seed}: {'ok' if not bad else '; '.join(bad)}  ({time.time() - t0:.1f}s)", flush=True)
        if not bad:
            break
        rejected.append({"seed": seed, "why": bad})
    else:
        sys.exit("no seed gave a fixture that keeps every promise")

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    model.save_pretrained(out)
    model = Lfm2AudioForConditionalGeneration.from_pretrained(out, attn_implementation="eager").eval()
    assert model.model.lfm.config._attn_implementation == "eager"
    trace = Trace(model)
    res2 = run_all(model, trace, prompts)
    assert same(res, res2), "the reloaded checkpoint does not reproduce the in-memory model bit for bit"
    res = res2
    assert not check(res)
    # How far transformers' float32 values are from the same computation in float64 (the model cast with .double(),
    # same decisions): the scale of float32 rounding a port should expect, and the basis of the tolerances.
    m64 = Lfm2AudioForConditionalGeneration.from_pretrained(out, attn_implementation="eager").eval().double()
    res64 = run_all(m64, Trace(m64), prompts)
    f64 = float64_diffs(res, res64)

    gens = {}
    for name, key, mode, max_new in GENERATE:
        gens[name] = gen_record(out, name, res[name], prompts[key], mode, max_new, frame_logits=name == "seq_a")
    c = prompts["spoken_c"]
    sp = {"prompt_ids": c["ids"], "prompt_length": len(c["ids"]), "modality_ids": c["modality_ids"],
          "first_audio_position": c["first_audio_position"], "audio_frames_in_prompt": c["frames"],
          "prompt_audio_codes": c["audio_codes"],
          "prompt_logits": write_bin(out, "outputs/spoken_c_prompt_logits.f32", res["spoken_c_logits"].numpy(), "<f4",
                                     "model(input_ids, modality_ids, audio_codes).logits[0]: text logits at every "
                                     "prompt position (the modality-3 positions included)"),
          "prompt_argmax": [int(v) for v in res["spoken_c_logits"].argmax(-1)],
          "continuation": gen_record(out, "spoken_c", res["spoken_c"], c["ids"], "sequential", SPOKEN_MAX_NEW)}
    dp = res["depth"]
    depth = {"rows_from": [f"{r} audio frame {f}" for r, f in DEPTH_ROWS] + ["random N(0,1) row, torch generator 5903"],
             "hidden": write_bin(out, "outputs/depth_hidden.f32", dp["hidden"].numpy(), "<f4",
                                 "backbone hidden rows handed to the depthformer"),
             "greedy_codes": dp["greedy"].tolist(),
             "greedy_margins": [f32json(m) for m in dp["margins"]],
             "labels": dp["labels"].tolist(),
             "teacher_forced_logits": write_bin(out, "outputs/depth_teacher_forced_logits.f32", dp["logits"].numpy(),
                                                "<f4", "compute_audio_logits(hidden, labels): [rows, codebooks, 2049]; "
                                                "codebook c's input is depth_linear(h)[c] + depth_embeddings[c-1]"
                                                "(labels[c-1]) (zero for c = 0), one causal pass over the 8 steps"),
             "greedy_incremental_logits": write_bin(out, "outputs/depth_greedy_logits.f32",
                                                    dp["incremental_logits"].numpy(), "<f4",
                                                    "_sample_audio_frame(h) greedy: the logits of each codebook step "
                                                    "(one query over the cached keys), [rows, codebooks, 2049]"),
             "rows_0_2_teacher_forced_vs_incremental_maxdiff": f32json(
                 (dp["logits"][:3] - dp["incremental_logits"][:3]).abs().max())}
    ckpt, meta = read_safetensors_header(os.path.join(out, "model.safetensors"))
    cfg = model.config
    ref = {"fixture": "lfm2audio_tts_tiny", "seed": seed, "rejected_seeds": rejected, "provenance": PROVENANCE,
           "what": "tiny random Lfm2AudioForConditionalGeneration with a live speech-output side: backbone and "
                   "encoder as lfm2audio_tiny_a, 8 codebooks x 2049 codes, depthformer 2 layers dim 32 (4 heads, 2 kv "
                   f"heads, ff {cfg.depthformer.intermediate_size}), tied depth embeddings, untied audio embeddings",
           "config_dict": json.loads(open(os.path.join(out, "config.json")).read()),
           "checkpoint_tensors": {"metadata": meta, "tensors": ckpt},
           "tokens": {"bos": BOS, "im_start": IM_START, "im_end": IM_END, "newline": NL, "audio_start": AUDIO_START,
                      "text_end": TEXT_END, "roles": ROLE, "vocab_size": VOCAB, "audio_eos_code": AUDIO_EOS,
                      "note": "No tokenizer: BOS/<|im_start|>/<|im_end|>/128/130 are the real LFM2(.5)-Audio ids; "
                              "the other ids are notional stand-ins for the chat template's text, drawn from "
                              "numpy default_rng(5902) in 140..255. At modality-3 prompt positions input_ids hold 0 "
                              "(ignored: those embeddings are replaced)."},
           "scenarios": SCENARIOS,
           "generate_semantics": GENERATE_SEMANTICS,
           "engineering": engineering, "engineering_margin": MARGIN, "min_greedy_margin_required": MIN_MARGIN,
           "generate": gens, "spoken_c": sp, "depth": depth,
           "float64_rerun_maxdiff": f64,
           "tolerances": {"hidden": 2e-5, "text_logits": 1e-4, "prompt_logits": 1e-4, "frame_logits": 1e-4,
                          "depth_logits": 1e-4,
                          "tokens_and_codes": f"exact: every greedy decision wins by >= {MIN_MARGIN} (margins "
                                              "recorded), and the float64 rerun takes every decision the same way",
                          "why": "absolute; about 3x transformers' own float32-vs-float64 distance "
                                 "(float64_rerun_maxdiff), after up to 60 steps; logits reach |x| ~ 47 (1e-4 is "
                                 "~2e-6 relative there)"}}
    write_json(os.path.join(out, "reference.json"), ref)
    shutil.rmtree(_OVERLAY_TMP, ignore_errors=True)
    print(f"done: seed {seed}; " + "; ".join(f"{n} {gens[n]['runs']}" for n in gens) +
          f"; spoken_c {sp['continuation']['runs']}  ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
