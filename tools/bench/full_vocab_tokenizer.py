#!/usr/bin/env python3
"""Grow a byte-level BPE tokenizer.json to a model's full vocabulary for serving benchmarks.

Random-weight benchmark models (`lfm gen-random`) sample ids across the whole vocabulary (65536
for LFM2). With a small test tokenizer most of those ids decode to nothing, and servers differ in
how they treat them (llama-server fails the stream). This adds merges of ASCII letter pairs and
triples ("ab", "abc", ...) until the vocabulary has VOCAB entries, so every non-special id
decodes to text on its own.

    python3 tools/bench/full_vocab_tokenizer.py IN/tokenizer.json OUT/tokenizer.json [--vocab 65536]
"""
import argparse
import itertools
import json
import string

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("dst")
ap.add_argument("--vocab", type=int, default=65536)
args = ap.parse_args()

tok = json.load(open(args.src, encoding="utf-8"))
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
print(f"{args.dst}: {len(used) + added} ids, {len(merges)} merges")
