#!/usr/bin/env python3
"""Grow a byte-level BPE tokenizer.json to a model's full vocabulary for serving benchmarks.

Random-weight benchmark models (`lfm gen-random`) sample ids across the whole vocabulary (65536
for LFM2). With a small test tokenizer most of those ids decode to nothing, and servers differ in
how they treat them (llama-server fails the stream). This adds merges of ASCII letter pairs and
triples ("ab", "abc", ...) until the vocabulary has VOCAB entries, so every non-special id
decodes to text on its own.

    python3 tools/bench/full_vocab_tokenizer.py IN/tokenizer.json OUT/tokenizer.json [--vocab 65536] [--vl]
    (with --vl, a tokenizer_config.json beside IN is written beside OUT with the same names)

--vl names the reserved ids LFM2-VL uses for images (an assumption of ours, as in
tests/data/hf_vl: <image> 396, <|img_row_R_col_C|> 397 + 10(R-1) + (C-1), <|img_thumbnail|> 497,
<|image_start|> 498, <|image_end|> 499, <|image_split|> 500), so lfm lays images out by name.
"""
import argparse
import itertools
import json
import string

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("dst")
ap.add_argument("--vocab", type=int, default=65536)
ap.add_argument("--vl", action="store_true")
args = ap.parse_args()

tok = json.load(open(args.src, encoding="utf-8"))
if args.vl:
    names = {396: "<image>", 497: "<|img_thumbnail|>", 498: "<|image_start|>", 499: "<|image_end|>",
             500: "<|image_split|>"}
    names.update({397 + 10 * (r - 1) + (c - 1): f"<|img_row_{r}_col_{c}|>" for r in range(1, 11) for c in range(1, 11)})
    for a in tok["added_tokens"]:
        if a["id"] in names:
            old, a["content"] = a["content"], names[a["id"]]
            if tok["model"]["vocab"].get(old) == a["id"]:
                del tok["model"]["vocab"][old]
                tok["model"]["vocab"][a["content"]] = a["id"]
vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
used = set(vocab.values()) | {a["id"] for a in tok["added_tokens"]}
free = iter([i for i in range(args.vocab) if i not in used])  # gaps first, then the tail
letters = string.ascii_letters
added = 0


def add(left, right):
    global added
    piece = left + right
    if piece in vocab or len(used) + added >= args.vocab:
        return
    vocab[piece] = next(free)
    merges.append(f"{left} {right}" if isinstance(merges[0], str) else [left, right])
    added += 1


for a, b in itertools.product(letters, letters):
    add(a, b)
for a, b, c in itertools.product(letters, letters, letters):
    if a + b in vocab:
        add(a + b, c)
assert len(used) + added == args.vocab, f"only reached {len(used) + added} ids"
json.dump(tok, open(args.dst, "w", encoding="utf-8"), ensure_ascii=False)
if args.vl:
    import os
    cfg_path = os.path.join(os.path.dirname(args.src), "tokenizer_config.json")
    if os.path.exists(cfg_path):
        cfg = json.load(open(cfg_path, encoding="utf-8"))
        for i, entry in cfg.get("added_tokens_decoder", {}).items():
            if int(i) in names:
                entry["content"] = names[int(i)]
        json.dump(cfg, open(os.path.join(os.path.dirname(args.dst), "tokenizer_config.json"), "w", encoding="utf-8"),
                  ensure_ascii=False, indent=2)
print(f"{args.dst}: {len(used) + added} ids, {len(merges)} merges")
