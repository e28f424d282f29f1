#!/usr/bin/env python3
"""Writes models/tiny-lfm2/: a tiny LFM2 text checkpoint with RANDOM weights, a byte-level BPE
tokenizer and LFM2's chat template, so every command in README.md runs on a fresh clone.

Deterministic (Python stdlib only): the same inputs give the same bytes.
    python3 tools/tiny_model/make_tiny_model.py tests/data/tokenizer \
        tests/data/assets/lfm2/LFM2-350M/chat_template.jinja models/tiny-lfm2

The tokenizer is the repository's synthetic one (tools/tokenizer: LFM2's pre-tokenizer, decoder,
post-processor and special tokens, a vocabulary trained on tools/tokenizer/corpus.txt). Its few
tokens that keep LFM2's high ids (64011..64399) are renumbered to follow the others, so the
embedding table has 3840 rows instead of 65536 and the checkpoint stays under 1 MB.
"""
import json
import math
import random
import shutil
import struct
import sys
from pathlib import Path

HIDDEN, HEADS, KV_HEADS, L_CACHE = 64, 4, 2, 3
LAYERS = ["conv", "full_attention", "conv", "full_attention"]
FF_DIM = 192  # intermediate_size 256 → 2/3·256 = 170 → multiple of 32 → 192 (the auto-adjust rule)
VOCAB = 3840  # tokenizer ids 0..3803, rounded up to a multiple of 64
SEED = 20250101


def compact_tokenizer(src: Path):
    tok = json.loads((src / "tokenizer.json").read_text())
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    vocab = tok["model"]["vocab"]
    low = [i for i in vocab.values() if i < 60000]
    nxt = max(low) + 1
    remap = {}
    for tid in sorted(i for i in vocab.values() if i >= 60000):
        remap[tid] = nxt
        nxt += 1
    assert nxt <= VOCAB, nxt
    tok["model"]["vocab"] = {k: remap.get(v, v) for k, v in vocab.items()}
    for a in tok["added_tokens"]:
        a["id"] = remap.get(a["id"], a["id"])
    cfg["added_tokens_decoder"] = {str(remap.get(int(k), int(k))): v for k, v in cfg["added_tokens_decoder"].items()}
    return tok, cfg


def bf16_bytes(values):
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        out += struct.pack("<H", (bits >> 16) & 0xFFFF)
    return bytes(out)


def byte_decoder():
    """GPT-2's byte-level alphabet (tokenizer.json's ByteLevel pieces) back to bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def plain_ids(tok):
    """Ids of the ordinary tokens that decode to printable ASCII (words, spaces, punctuation)."""
    dec = byte_decoder()
    special = {a["id"] for a in tok["added_tokens"]}
    out = set()
    for piece, tid in tok["model"]["vocab"].items():
        if tid in special or any(c not in dec for c in piece):
            continue
        if all(32 <= dec[c] < 127 for c in piece):
            out.add(tid)
    return out


def tensors(plain):
    rng = random.Random(SEED)

    def uniform(n, a):
        return [rng.uniform(-a, a) for _ in range(n)]

    def linear(rows, cols):  # Xavier-uniform, as LFM2's config asks (block_use_xavier_init)
        return [rows, cols], uniform(rows * cols, math.sqrt(6.0 / (rows + cols)))

    hd = HIDDEN // HEADS
    t = {}
    # A random tied model tends to repeat its input token forever; a smaller embedding table and
    # a larger final-norm gain spread its greedy choices (as the LFM2-VL fixtures do).
    # Tokens that are not printable ASCII text (specials, lone bytes of UTF-8 sequences, padding
    # rows) get short rows, so their tied logits rarely win and the random text stays readable.
    emb = uniform(VOCAB * HIDDEN, 0.4)
    for tid in range(VOCAB):
        if tid not in plain:
            emb[tid * HIDDEN:(tid + 1) * HIDDEN] = [v * 0.1 for v in emb[tid * HIDDEN:(tid + 1) * HIDDEN]]
    t["model.embed_tokens.weight"] = ([VOCAB, HIDDEN], emb)
    t["model.embedding_norm.weight"] = ([HIDDEN], [rng.uniform(3.0, 5.0) for _ in range(HIDDEN)])
    for i, kind in enumerate(LAYERS):
        p = f"model.layers.{i}."
        t[p + "operator_norm.weight"] = ([HIDDEN], [1.0] * HIDDEN)
        t[p + "ffn_norm.weight"] = ([HIDDEN], [1.0] * HIDDEN)
        t[p + "feed_forward.w1.weight"] = linear(FF_DIM, HIDDEN)
        t[p + "feed_forward.w3.weight"] = linear(FF_DIM, HIDDEN)
        t[p + "feed_forward.w2.weight"] = linear(HIDDEN, FF_DIM)
        if kind == "conv":
            t[p + "conv.in_proj.weight"] = linear(3 * HIDDEN, HIDDEN)
            t[p + "conv.conv.weight"] = ([HIDDEN, 1, L_CACHE], uniform(HIDDEN * L_CACHE, 1 / math.sqrt(L_CACHE)))
            t[p + "conv.out_proj.weight"] = linear(HIDDEN, HIDDEN)
        else:
            t[p + "self_attn.q_proj.weight"] = linear(HIDDEN, HIDDEN)
            t[p + "self_attn.k_proj.weight"] = linear(KV_HEADS * hd, HIDDEN)
            t[p + "self_attn.v_proj.weight"] = linear(KV_HEADS * hd, HIDDEN)
            t[p + "self_attn.out_proj.weight"] = linear(HIDDEN, HIDDEN)
            t[p + "self_attn.q_layernorm.weight"] = ([hd], [1.0] * hd)
            t[p + "self_attn.k_layernorm.weight"] = ([hd], [1.0] * hd)
    return t


def write_safetensors(path: Path, t):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(t):
        shape, values = t[name]
        data = bf16_bytes(values)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def config():
    return {
        "architectures": ["Lfm2ForCausalLM"],
        "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0,
        "block_multiple_of": 32,
        "bos_token_id": 1,
        "conv_L_cache": L_CACHE,
        "conv_bias": False,
        "eos_token_id": 7,
        "hidden_size": HIDDEN,
        "intermediate_size": 256,
        "layer_types": LAYERS,
        "max_position_embeddings": 128000,
        "model_type": "lfm2",
        "norm_eps": 1e-05,
        "num_attention_heads": HEADS,
        "num_hidden_layers": len(LAYERS),
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": 0,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tok_dir, template, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    tok, tok_cfg = compact_tokenizer(tok_dir)
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, ensure_ascii=False, indent=1) + "\n")
    shutil.copyfile(template, out / "chat_template.jinja")
    (out / "config.json").write_text(json.dumps(config(), indent=2) + "\n")
    # A random model repeats itself under greedy decoding; the penalty keeps its text varied.
    gen = {"bos_token_id": 1, "eos_token_id": 7, "pad_token_id": 0, "repetition_penalty": 1.5}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    write_safetensors(out / "model.safetensors", tensors(plain_ids(tok)))


if __name__ == "__main__":
    main()
