#!/usr/bin/env python3
"""Regenerates tests/data/retrieval: golden fixtures for the LFM2 retrieval models (LFM2.5-Embedding-350M,
LFM2.5-ColBERT-350M, LFM2-ColBERT-350M), tiny random checkpoints run by the Hugging Face transformers code.

    /usr/bin/python3 tools/retrieval_reference/make_retrieval_fixtures.py [--out tests/data/retrieval]
        [--hf-ref ../shared/tools/hf_reference] [--overlay $HF_REF_ROOT/overlay/lfm2_bidirectional]

- Backbones: transformers v5.2.0 (hfenv + vl_compat from ../shared/tools/hf_reference) for the causal `Lfm2Model`;
  the bidirectional `Lfm2BidirectionalModel` is newer than v5.2.0: its upstream modeling file (and __init__) are laid
  over the v5.2.0 tree unmodified (`--overlay`, checked by SHA-256 below), with the config class ported to v5.2.0's
  keyword style in ./configuration_lfm2_bidirectional.py.  Nothing from transformers is stored in the repository.
- The sentence-transformers / PyLate steps (prompts, prefix insertion, query expansion, truncation, pooling, Dense,
  L2 normalisation, skiplist, MaxSim) are restated here from the PyLate / sentence-transformers sources cited in
  tests/data/retrieval/README.md (neither package is installed here).
- float32 on CPU, one thread, eager attention, fixed seeds; checkpoints saved with save_pretrained and reloaded with
  from_pretrained before anything is recorded (the reloaded model must reproduce the in-memory one bit for bit).
  Two runs give identical files.
"""
import argparse
import hashlib
import json
import os
import shutil
import string
import struct
import sys
import tempfile
import time

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "retrieval"))
ap.add_argument("--hf-ref", default=os.path.join(REPO, "..", "shared", "tools", "hf_reference"))
ap.add_argument("--overlay", default=None, help="folder with the upstream lfm2_bidirectional __init__.py and "
                "modeling_lfm2_bidirectional.py (default: $HF_REF_ROOT/overlay/lfm2_bidirectional)")
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
# The bidirectional model folder laid over transformers v5.2.0
TF_COMMIT = "7d9754a05193eb79b1d86aa744b622b8068008cd"  # v5.2.0
OVERLAY_FILES = {  # upstream huggingface/transformers files, used unmodified (path, commit, sha256 of the bytes)
    "__init__.py": ("src/transformers/models/lfm2_bidirectional/__init__.py",
                    "e8cccdfec6a84242f2cacb84e4a75e5ccfd8a8aa",
                    "8c3f09293f325c4810b72c07bd960d01c16e20de5e4a23ff2939905d141ab1da"),
    "modeling_lfm2_bidirectional.py": ("src/transformers/models/lfm2_bidirectional/modeling_lfm2_bidirectional.py",
                                       "d25b7800bf25ee544c152cfb7f1e17e8bab3e36b",
                                       "6d0caa0dddb8b388ac8445f746cdc6d9bc41ad8c58644893a781f088ef13e7d8"),
}
CONFIG_PORT = ("src/transformers/models/lfm2_bidirectional/configuration_lfm2_bidirectional.py",
               "d25b7800bf25ee544c152cfb7f1e17e8bab3e36b")
MODULAR = ("src/transformers/models/lfm2_bidirectional/modular_lfm2_bidirectional.py",
           "e8cccdfec6a84242f2cacb84e4a75e5ccfd8a8aa")


def sha256_file(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def lay_over_bidirectional():
    src = ARGS.overlay or os.path.join(hfenv.HF_ROOT, "overlay", "lfm2_bidirectional")
    tmp = tempfile.mkdtemp(prefix="lfm2bidir_")
    pkg = os.path.join(tmp, "lfm2_bidirectional")
    os.makedirs(pkg)
    for name, (_, commit, digest) in OVERLAY_FILES.items():
        p = os.path.join(src, name)
        if not os.path.isfile(p) or sha256_file(p) != digest:
            sys.exit(f"{p}: missing or not the upstream file ({commit}); see tools/retrieval_reference/README.md")
        shutil.copy(p, pkg)
    shutil.copy(os.path.join(HERE, "configuration_lfm2_bidirectional.py"), pkg)
    _tm.__path__.append(tmp)  # -> transformers.models.lfm2_bidirectional
    return tmp


_OVERLAY_TMP = lay_over_bidirectional()
from transformers.models.lfm2_bidirectional import Lfm2BidirectionalConfig, Lfm2BidirectionalModel  # noqa: E402
from transformers.models.lfm2 import Lfm2Config, Lfm2Model  # noqa: E402

SHIMS = list(hfenv.COMPAT_SHIMS) + [
    "models/lfm2_bidirectional laid over the v5.2.0 tree: a temporary package folder appended to "
    "transformers.models.__path__ (upstream __init__.py and modeling_lfm2_bidirectional.py byte for byte)",
    "Lfm2BidirectionalConfig: the upstream @strict dataclass restated in v5.2.0 keyword style "
    "(tools/retrieval_reference/configuration_lfm2_bidirectional.py; same fields, defaults and __post_init__ logic)",
    "attn_implementation='eager' forced (torch 1.13 has no F.scaled_dot_product_attention)",
]
PROVENANCE = {
    "transformers": transformers.__version__,
    "transformers_commit": TF_COMMIT,
    "laid_over": [{"file": v[0], "commit": v[1], "sha256": v[2], "use": "unmodified"} for v in OVERLAY_FILES.values()]
    + [{"file": CONFIG_PORT[0], "commit": CONFIG_PORT[1], "use": "ported to v5.2.0 keyword style: "
        "tools/retrieval_reference/configuration_lfm2_bidirectional.py"},
       {"file": MODULAR[0], "commit": MODULAR[1], "use": "read only (the modeling file is generated from it)"}],
    "pylate": "lightonai/pylate@1f1f47cee5df35ebe6fd2286a0a205a1523e4119 (restated, not run)",
    "sentence_transformers": "UKPLab/sentence-transformers@85ec64559f4414aa536eca4bf53538291e0a333f (restated, not run)",
    "torch": torch.__version__,
    "numpy": np.__version__,
    "python": sys.version.split()[0],
    "attn_implementation": "eager",
    "dtype": "float32",
    "threads": 1,
    "compat_shims": SHIMS,
    "generator": "tools/retrieval_reference/make_retrieval_fixtures.py",
}

# ------------------------------------------------------------------------------------------------------------------
# The fixtures' notional tokenizer (vocab 256; there is no tokenizer.json: every text is given as ids)
BOS, PAD, EOS = 1, 0, 7           # <|startoftext|>, <|pad|>, <|im_end|>  (as in the real LFM2 tokenizers)
Q_PREFIX, D_PREFIX = 250, 251     # "[Q] ", "[D] "   (real LFM2.5-ColBERT-350M: 64400, 64401)
PROMPT_IDS = {"query": [240, 58], "document": [241, 58]}  # "query: " / "document: " ("query"/"document", ":")
SKIPLIST_WORDS = list(string.punctuation)
SKIPLIST = {w: ord(w) for w in SKIPLIST_WORDS}  # punctuation character c is token id ord(c) here


def tokens_block(kind, st):
    t = {"bos": BOS, "eos": EOS, "pad": PAD, "vocab_size": 256,
         "note": "No tokenizer.json: raw_ids are what a tokenizer with add_bos_token=true (and no EOS) gives; "
                 "content ids are drawn from 100..249; punctuation character c is id ord(c)."}
    if kind == "embedding":
        t.update({"prompt_ids": PROMPT_IDS, "batch_pad": PAD,
                  "batch_pad_note": "sentence-transformers pads a batch with the tokenizer's pad token (<|pad|> = 0)"})
    else:
        t.update({"query_prefix": Q_PREFIX, "document_prefix": D_PREFIX, "expansion": EOS, "batch_pad": EOS,
                  "expansion_note": "PyLate sets tokenizer.pad_token_id = mask_token_id if the tokenizer has a mask "
                                    "token, else eos_token_id: LFM2 tokenizers have no mask token, so queries are "
                                    "expanded (and document batches padded) with <|im_end|> = 7",
                  "skiplist": SKIPLIST, "skiplist_ids": sorted(SKIPLIST.values())})
    return t


# Texts: content ids (no BOS).  Lengths chosen so that truncation, a one-token text and the skiplist all show.
def make_texts():
    g = np.random.default_rng(20260612)

    def content(n):
        return [int(x) for x in g.integers(100, 240, size=n)]

    punct = content(10)
    for pos, ch in ((2, ","), (4, "."), (5, "!"), (8, "?"), (9, ":")):
        punct[pos] = SKIPLIST[ch]
    return [
        ("q_short", "query", content(3)),
        ("q_mid", "query", content(7)),
        ("q_one", "query", content(1)),
        ("q_long", "query", content(14)),
        ("d_one", "document", content(1)),
        ("d_short", "document", content(5)),
        ("d_punct", "document", punct),
        ("d_mid", "document", content(12)),
        ("d_long", "document", content(29)),
        ("d_empty", "document", []),
    ]


# ------------------------------------------------------------------------------------------------------------------
FIXTURES = [
    {"name": "lfm25_embedding_tiny_f32", "kind": "embedding", "backbone": "bidirectional", "seed": 5701,
     "config": {"layer_types": ["conv", "full_attention", "conv", "conv", "full_attention", "conv"],
                "intermediate_size": 192, "block_auto_adjust_ff_dim": True, "block_multiple_of": 32,
                "block_ffn_dim_multiplier": 1.0, "conv_bias": False},
     "st": {"max_seq_length": 24}},
    {"name": "lfm25_colbert_tiny_f32", "kind": "colbert", "backbone": "bidirectional", "seed": 5702,
     "config": {"layer_types": ["full_attention", "conv", "conv", "full_attention", "conv", "full_attention"],
                "intermediate_size": 96, "block_auto_adjust_ff_dim": False, "block_multiple_of": 32,
                "block_ffn_dim_multiplier": 1.0, "conv_bias": True},
     "st": {"query_length": 12, "document_length": 20, "dense_out": 16, "attend_to_expansion_tokens": False,
            "do_query_expansion": True}},
    {"name": "lfm2_colbert_tiny_f32", "kind": "colbert", "backbone": "causal", "seed": 5703,
     "config": {"layer_types": ["conv", "conv", "full_attention", "conv", "full_attention", "conv"],
                "intermediate_size": 200, "block_auto_adjust_ff_dim": True, "block_multiple_of": 16,
                "block_ffn_dim_multiplier": 1.5, "conv_bias": False},
     "st": {"query_length": 12, "document_length": 20, "dense_out": 16, "attend_to_expansion_tokens": False,
            "do_query_expansion": True}},
]
HIDDEN = 64


def build_config(fx):
    common = dict(vocab_size=256, hidden_size=HIDDEN, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128000, norm_eps=1e-5, conv_L_cache=3,
                  pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, tie_word_embeddings=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attn_implementation="eager",
                  **fx["config"])
    return (Lfm2BidirectionalConfig if fx["backbone"] == "bidirectional" else Lfm2Config)(**common)


def randomize(model, seed):
    """Every parameter drawn from a seeded generator, scaled so every operator matters: linear N(0, 1/fan_in),
    conv taps N(0, 1/3), biases N(0, 0.1^2), norm gains U(0.5, 1.5) (so the final embedding_norm matters),
    embeddings N(0, 1) with the padding row (id 0) zero as nn.Embedding(padding_idx=0) initialises it."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name == "embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=g))
                p[PAD].zero_()
            elif name.endswith("conv.conv.weight"):
                p.copy_(torch.randn(p.shape, generator=g) / 3 ** 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                raise ValueError(name)


# ------------------------------------------------------------------------------------------------------------------
# safetensors / JSON helpers
def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k], dtype="<f4")
        b = a.tobytes()
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    dt = {"F32": np.float32, "BF16": None, "F16": np.float16}
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = {"dtype": v["dtype"], "shape": v["shape"],
                  "array": np.frombuffer(data[a:b], dtype=dt[v["dtype"]]).reshape(v["shape"])}
    return out, h.get("__metadata__")


def f32(x):
    """float32 values as JSON numbers: 9 significant digits round-trip every float32 exactly."""
    a = np.asarray(x, dtype=np.float32)
    if a.ndim == 0:
        return float(f"{float(a):.9g}")
    return [f32(v) for v in a]


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


def write_json(path, obj, compact=False):
    s = json.dumps(obj, indent=2, ensure_ascii=False) if compact else _dumps(obj)
    json.loads(s)
    with open(path, "w", encoding="utf-8") as f:
        f.write(s)
        f.write("\n")


# ------------------------------------------------------------------------------------------------------------------
# The pipelines, restated from sentence-transformers / PyLate
def st_embedding_ids(role, content, max_seq_length):
    """sentence-transformers encode(prompt_name=role): text = prompt + text; the tokenizer adds BOS; truncation to
    max_seq_length (truncation='longest_first' keeps the head); no EOS."""
    raw = [BOS] + (PROMPT_IDS[role] if role else []) + content
    ids = raw[:max_seq_length]
    return raw, ids, [1] * len(ids)


def pylate_ids(role, content, st):
    """PyLate ColBERT.tokenize: max_seq_length = length - 1 (one place kept for the prefix); the tokenizer adds BOS
    and truncates to that; queries (do_query_expansion) are padded to it with pad_token_id (= EOS here) and mask 0;
    then the prefix id is inserted after the first token (mask 1); queries with attend_to_expansion_tokens get an
    all-ones mask."""
    is_query = role == "query"
    length = st["query_length"] if is_query else st["document_length"]
    raw = [BOS] + content
    ids = raw[: length - 1]
    mask = [1] * len(ids)
    if is_query and st["do_query_expansion"]:
        n_pad = length - 1 - len(ids)
        ids, mask = ids + [EOS] * n_pad, mask + [0] * n_pad
    prefix = Q_PREFIX if is_query else D_PREFIX
    ids = ids[:1] + [prefix] + ids[1:]
    mask = mask[:1] + [1] + mask[1:]
    if is_query and st["attend_to_expansion_tokens"]:
        mask = [1] * len(mask)
    return raw, ids, mask


def pylate_vector_mask(role, ids, mask, st):
    """ColBERT.encode: queries keep every vector when do_query_expansion (expansion vectors included), else the
    attention mask; documents keep attention_mask AND not-in-skiplist."""
    if role == "query":
        return [1] * len(ids) if st["do_query_expansion"] else list(mask)
    sk = set(SKIPLIST.values())
    return [int(m == 1 and i not in sk) for i, m in zip(ids, mask)]


def colbert_scores(q, d, q_mask=None, d_mask=None):
    """pylate.scores.colbert_scores: einsum('ash,bth->abst'), scores multiplied by the masks (a masked token gives
    0, not -inf), max over document tokens, sum over query tokens."""
    s = torch.einsum("ash,bth->abst", q, d)
    if q_mask is not None:
        s = s * q_mask.unsqueeze(1).unsqueeze(3)
    if d_mask is not None:
        s = s * d_mask.unsqueeze(0).unsqueeze(2)
    return s.max(axis=-1).values.sum(axis=-1)


@torch.no_grad()
def run(model, ids_list, mask_list, pad_id):
    """One forward of a right-padded batch (pad_id, mask 0 on padding); returns per text its real rows."""
    n = max(len(x) for x in ids_list)
    ii = torch.tensor([x + [pad_id] * (n - len(x)) for x in ids_list], dtype=torch.long)
    mm = torch.tensor([m + [0] * (n - len(m)) for m in mask_list], dtype=torch.long)
    h = model(input_ids=ii, attention_mask=mm).last_hidden_state
    return [h[b, : len(x)].clone() for b, x in enumerate(ids_list)], n


def pool(kind, h, mask):
    """sentence-transformers Pooling on one text's rows: cls = row 0; mean over mask-1 rows (clamped count);
    lasttoken = the last mask-1 row."""
    m = torch.tensor(mask, dtype=h.dtype)[:, None]
    if kind == "cls":
        return h[0]
    if kind == "mean":
        return (h * m).sum(0) / torch.clamp(m.sum(0), min=1e-9)
    idx = max(i for i, v in enumerate(mask) if v == 1)
    return h[idx] * m[idx]


def maxabs(a, b):
    return float((a - b).abs().max()) if a.numel() else 0.0


# ------------------------------------------------------------------------------------------------------------------
def st_files(d, fx):
    st = fx["st"]
    version = {"sentence_transformers": "not installed: written by tools/retrieval_reference/make_retrieval_fixtures.py "
               "in sentence-transformers' layout", "transformers": transformers.__version__, "pytorch": torch.__version__}
    tok_cfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<|startoftext|>", "eos_token": "<|im_end|>",
               "pad_token": "<|pad|>", "padding_side": "right", "model_max_length": 1000000000000000019884624838656,
               "tokenizer_class": "PreTrainedTokenizerFast",
               "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                                 "single_word": False, "special": s}
                                        for i, c, s in ((PAD, "<|pad|>", True), (BOS, "<|startoftext|>", True),
                                                        (EOS, "<|im_end|>", True))}}
    special = {"bos_token": "<|startoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|pad|>"}
    if fx["kind"] == "embedding":
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
        write_json(os.path.join(d, "1_Pooling", "config.json"), {
            "word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False,
            "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False, "include_prompt": True},
            compact=True)
        write_json(os.path.join(d, "sentence_bert_config.json"),
                   {"max_seq_length": st["max_seq_length"], "do_lower_case": False}, compact=True)
        write_json(os.path.join(d, "config_sentence_transformers.json"), {
            "__version__": version, "prompts": {"query": "query: ", "document": "document: "},
            "default_prompt_name": None, "similarity_fn_name": "cosine"}, compact=True)
    else:
        tok_cfg["added_tokens_decoder"].update({str(i): {"content": c, "lstrip": False, "normalized": True, "rstrip": False,
                                                         "single_word": False, "special": False}
                                                for i, c in ((Q_PREFIX, "[Q] "), (D_PREFIX, "[D] "))})
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]
        os.makedirs(os.path.join(d, "1_Dense"), exist_ok=True)
        write_json(os.path.join(d, "1_Dense", "config.json"), {
            "in_features": HIDDEN, "out_features": st["dense_out"], "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity", "use_residual": False}, compact=True)
        write_json(os.path.join(d, "sentence_bert_config.json"),
                   {"max_seq_length": st["document_length"] - 1, "do_lower_case": False}, compact=True)
        write_json(os.path.join(d, "config_sentence_transformers.json"), {
            "__version__": version, "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
            "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": st["query_length"],
            "document_length": st["document_length"], "attend_to_expansion_tokens": st["attend_to_expansion_tokens"],
            "skiplist_words": SKIPLIST_WORDS, "do_query_expansion": st["do_query_expansion"]}, compact=True)
    tok_cfg["added_tokens_decoder"] = dict(sorted(tok_cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0])))
    write_json(os.path.join(d, "modules.json"), modules, compact=True)
    write_json(os.path.join(d, "tokenizer_config.json"), tok_cfg, compact=True)
    write_json(os.path.join(d, "special_tokens_map.json"), special, compact=True)


def effective(model):
    c = model.config
    per_layer = []
    for i, L in enumerate(model.layers):
        e = {"type": c.layer_types[i], "intermediate_size": L.feed_forward.w1.out_features}
        if hasattr(L, "conv"):
            e["conv_bias"] = L.conv.conv.bias is not None
            e["conv_kernel"] = L.conv.conv.kernel_size[0]
            e["conv_padding"] = L.conv.conv.padding[0] if hasattr(L.conv.conv, "padding") else None
        else:
            e["head_dim"] = L.self_attn.head_dim
            e["is_causal"] = L.self_attn.is_causal
        per_layer.append(e)
    return {"model_type": c.model_type, "architecture": type(model).__name__, "layer_types": c.layer_types,
            "layers": per_layer, "hidden_size": c.hidden_size, "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads, "head_dim": c.hidden_size // c.num_attention_heads,
            "rope_parameters": c.rope_parameters, "norm_eps": c.norm_eps, "conv_L_cache": c.conv_L_cache,
            "tie_word_embeddings": c.tie_word_embeddings, "attn_implementation": c._attn_implementation,
            "final_norm": "embedding_norm (RMSNorm, random gain) applied to the last layer's output",
            "conv": ("centred depthwise Conv1d(kernel L, padding L//2), no padding mask (padding leaks into neighbours)"
                     if c.model_type == "lfm2_bidirectional" else
                     "causal depthwise Conv1d (left context L-1); Lfm2 zeroes the conv input at mask-0 positions "
                     "only when batch > 1 (apply_mask_to_padding_states)")}


def make_fixture(fx, texts):
    st = fx["st"]
    d = os.path.join(OUT, fx["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    torch.manual_seed(fx["seed"])
    cfg = build_config(fx)
    Model = Lfm2BidirectionalModel if fx["backbone"] == "bidirectional" else Lfm2Model
    mem = Model(cfg).eval()
    randomize(mem, fx["seed"])
    g = torch.Generator().manual_seed(fx["seed"] + 1)
    dense = None
    if fx["kind"] == "colbert":
        dense = torch.randn(st["dense_out"], HIDDEN, generator=g) / HIDDEN ** 0.5

    # the texts, processed as the library would
    rows = []
    for name, role, content in texts:
        if fx["kind"] == "embedding":
            raw, ids, mask = st_embedding_ids(role, content, st["max_seq_length"])
        else:
            raw, ids, mask = pylate_ids(role, content, st)
        rows.append({"name": name, "role": role, "raw_ids": raw, "ids": ids, "attention_mask": mask})
    if fx["kind"] == "embedding":
        rows.append({"name": "bos_only", "role": None, **dict(zip(("raw_ids", "ids", "attention_mask"),
                                                                  st_embedding_ids(None, [], st["max_seq_length"])))})

    before = [run(mem, [r["ids"]], [r["attention_mask"]], PAD)[0][0] for r in rows]
    mem.save_pretrained(d)
    model = Model.from_pretrained(d, attn_implementation="eager").eval()
    assert model.config._attn_implementation == "eager"
    for r, h0 in zip(rows, before):
        h = run(model, [r["ids"]], [r["attention_mask"]], PAD)[0][0]
        assert torch.equal(h, h0), f"{fx['name']}/{r['name']}: reloaded model differs from the in-memory one"
    if dense is not None:
        os.makedirs(os.path.join(d, "1_Dense"), exist_ok=True)
        save_safetensors(os.path.join(d, "1_Dense", "model.safetensors"), {"linear.weight": dense.numpy()})
        back, _ = read_safetensors(os.path.join(d, "1_Dense", "model.safetensors"))
        assert np.array_equal(back["linear.weight"]["array"], dense.numpy())
        dense = torch.from_numpy(back["linear.weight"]["array"].copy())
    st_files(d, fx)
    ckpt, meta = read_safetensors(os.path.join(d, "model.safetensors"))

    def colbert_vectors(h):
        return F.normalize(h @ dense.T, p=2, dim=1)

    out_rows = []
    for r in rows:
        h = run(model, [r["ids"]], [r["attention_mask"]], PAD)[0][0]
        e = dict(r)
        e["n"] = len(r["ids"])
        e["hidden"] = f32(h.numpy())
        if fx["kind"] == "embedding":
            e["embedding"] = f32(F.normalize(pool("cls", h, r["attention_mask"]), p=2, dim=0).numpy())
            e["mean"] = f32(pool("mean", h, r["attention_mask"]).numpy())
            e["last"] = f32(pool("last", h, r["attention_mask"]).numpy())
        else:
            e["vectors"] = f32(colbert_vectors(h).numpy())
            e["vector_mask"] = pylate_vector_mask(r["role"], r["ids"], r["attention_mask"], st)
        e["_h"] = h
        out_rows.append(e)

    qs = [e for e in out_rows if e["role"] == "query"]
    ds = [e for e in out_rows if e["role"] == "document"]
    scores = {"queries": [e["name"] for e in qs], "documents": [e["name"] for e in ds]}
    if fx["kind"] == "embedding":
        Q = torch.tensor([e["embedding"] for e in qs])
        D = torch.tensor([e["embedding"] for e in ds])
        scores["what"] = "cosine: dot of the L2-normalised CLS embeddings (similarity_fn_name 'cosine')"
        scores["values"] = f32((Q @ D.T).numpy())
    else:
        def kept(e):
            v = torch.tensor(e["vectors"])
            return v[torch.tensor(e["vector_mask"], dtype=torch.bool)]
        vals, zp = [], []
        Dpad = torch.nn.utils.rnn.pad_sequence([kept(e) for e in ds], batch_first=True, padding_value=0)
        for q in qs:
            qv = kept(q)
            vals.append([float(colbert_scores(qv[None], kept(dd)[None])[0, 0]) for dd in ds])
            zp.append(colbert_scores(qv[None], Dpad)[0].tolist())
        scores["what"] = ("MaxSim as pylate.scores.colbert_scores on the vectors ColBERT.encode returns (vector_mask 1 "
                          "rows only, one query x one document): sum over query vectors of the max dot product")
        scores["values"] = f32(vals)
        scores["rerank_zero_padded"] = f32(zp)
        scores["rerank_zero_padded_what"] = ("as pylate.rank.rerank computes it: the documents' kept vectors padded "
                                             "with zero rows to the longest, no mask, so a padded row scores 0 and can "
                                             "win the max when every real similarity is negative")

    # padded batches: as sentence-transformers / PyLate batch them (right padding, padding mask)
    pad_id = PAD if fx["kind"] == "embedding" else EOS
    padded = {"pad_id": pad_id}
    for group, members in (("documents", ds), ("queries", qs)):
        hs, n = run(model, [e["ids"] for e in members], [e["attention_mask"] for e in members], pad_id)
        recs = []
        for e, hb in zip(members, hs):
            rec = {"name": e["name"], "n": e["n"], "hidden_maxdiff": maxabs(hb, e["_h"])}
            if fx["kind"] == "embedding":
                emb = F.normalize(pool("cls", hb, e["attention_mask"]), p=2, dim=0)
                rec["embedding_maxdiff"] = maxabs(emb, torch.tensor(e["embedding"]))
                rec["mean_maxdiff"] = maxabs(pool("mean", hb, e["attention_mask"]), torch.tensor(e["mean"]))
                rec["last_maxdiff"] = maxabs(pool("last", hb, e["attention_mask"]), torch.tensor(e["last"]))
            else:
                m = torch.tensor(e["vector_mask"], dtype=torch.bool)
                rec["vectors_maxdiff"] = maxabs(colbert_vectors(hb)[m], torch.tensor(e["vectors"])[m])
            recs.append(rec)
        padded[group] = {"batch_length": n, "texts": recs,
                         "max_hidden_maxdiff": max(x["hidden_maxdiff"] for x in recs)}
    padded["what"] = ("each group run as ONE right-padded batch (pad_id, attention mask 0 on padding); per text the "
                      "max abs difference of its real rows / pooled vectors from the run-alone values")
    for e in out_rows:
        del e["_h"]

    ref = {
        "fixture": fx["name"], "kind": fx["kind"], "backbone": fx["backbone"], "seed": fx["seed"],
        "provenance": PROVENANCE,
        "effective": effective(model),
        "config_dict": json.loads(open(os.path.join(d, "config.json")).read()),
        "checkpoint_tensors": {"metadata": meta, "tensors": {k: {"dtype": v["dtype"], "shape": v["shape"]}
                                                             for k, v in sorted(ckpt.items())}},
        "pipeline": pipeline_note(fx),
        "tokens": tokens_block(fx["kind"], st),
        "texts": out_rows,
        "scores": scores,
        "padded_batch": padded,
        "tolerances": {"hidden": 1e-4, "embedding_or_vectors": 1e-4, "scores": 1e-4},
    }
    write_json(os.path.join(d, "reference.json"), ref)
    return ref


def pipeline_note(fx):
    st = fx["st"]
    if fx["kind"] == "embedding":
        return {"library": "sentence-transformers", "modules": ["Transformer", "Pooling(cls)"],
                "max_seq_length": st["max_seq_length"],
                "steps": ["text = prompt + text (prompts from config_sentence_transformers.json, by prompt_name)",
                          "ids = tokenizer(text) with BOS, truncated to max_seq_length (head kept)",
                          "hidden = model(ids).last_hidden_state (after embedding_norm)",
                          "embedding = hidden[0] (CLS pooling: the BOS position), then L2-normalised for cosine "
                          "(the module list has no Normalize; similarity_fn_name 'cosine' normalises)"]}
    return {"library": "PyLate", "modules": ["Transformer", "Dense(%d->%d, bias=false, Identity)" % (HIDDEN, st["dense_out"])],
            **{k: st[k] for k in ("query_length", "document_length", "attend_to_expansion_tokens", "do_query_expansion")},
            "steps": ["ids = tokenizer(text) with BOS, truncated to length-1 (length = query_length / document_length)",
                      "queries: padded to length-1 with the expansion id (EOS), mask 0 there",
                      "the prefix id ([Q] / [D]) inserted after the first token, mask 1",
                      "queries with attend_to_expansion_tokens: mask all ones (here false: expansion keys masked)",
                      "hidden = model(ids, attention_mask).last_hidden_state; vectors = L2norm(hidden @ W^T) per token",
                      "queries keep every vector (expansion included); documents drop skiplist and padding vectors"]}


OUT = os.path.abspath(ARGS.out)


def main():
    t0 = time.time()
    os.makedirs(OUT, exist_ok=True)
    texts = make_texts()
    summary = {}
    for fx in FIXTURES:
        ref = make_fixture(fx, texts)
        pb = ref["padded_batch"]
        summary[fx["name"]] = {g: pb[g]["max_hidden_maxdiff"] for g in ("documents", "queries")}
        print(f"{fx['name']}: padded-batch max hidden diff {summary[fx['name']]}  ({time.time() - t0:.1f}s)", flush=True)
    shutil.rmtree(_OVERLAY_TMP, ignore_errors=True)
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
