#!/usr/bin/env python3
"""Trains a small byte-level BPE and writes an LFM2-style tokenizer.json for the lfm tests.

The result has the real LFM2 pre-tokenizer regex, post-processor, decoder and added tokens (read
from an LFM2 tokenizer_config.json), but a tiny vocabulary learned from corpus.txt, because the
real 64,400-entry vocabulary is not available. Standard library only; fully deterministic.

usage: train_bpe.py CORPUS TOKENIZER_CONFIG OUT_DIR [--merges N]
Writes OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json (the given config, re-serialised).
"""
import argparse
import json
import os
import re
from collections import Counter, defaultdict

# The pre-tokenizer regex of LFM2's tokenizer.json (Oniguruma/PCRE syntax), written verbatim.
LFM2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Python's re has no \p{..}; for TRAINING ONLY this approximation is good enough (letters =
# [^\W\d_], numbers = \d). The tokenizer itself never uses it.
TRAINING_SPLIT = re.compile(
    r"'(?i:s|t|re|ve|m|ll|d)|[^\r\n\w]?[^\W\d_]+|_?[^\W\d_]+|\d{1,3}| ?[^\s\w]+[\r\n]*| ?_+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Whole-word vocabulary entries that no merge produces, so that ignore_merges (a pre-token that
# is itself a vocab entry is emitted whole) changes results in the tests.
WHOLE_WORD_ONLY = ["Ġantidisestablishment", "Ġzyzzyva", "Ġquixotically", "Ġ12", "xylophone"]

FIRST_BYTE_ID = 501  # LFM2's added tokens occupy the ids below


def bytes_to_unicode():
    """GPT-2's byte → printable code point table."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, shifted = {}, 256
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(shifted)
            shifted += 1
    return table


def train(words, num_merges):
    """words: Counter of tuples of symbols. Returns merges in rank order."""
    words = [(list(w), c) for w, c in sorted(words.items())]
    pair_count = Counter()
    where = defaultdict(set)  # pair → indices of words containing it
    for i, (syms, c) in enumerate(words):
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] += c
            where[(a, b)].add(i)
    merges = []
    while len(merges) < num_merges and pair_count:
        # Most frequent pair; ties broken by the pair itself so runs are reproducible.
        best = min(pair_count.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        merged = best[0] + best[1]
        for i in sorted(where.pop(best, ())):
            syms, c = words[i]
            for a, b in zip(syms, syms[1:]):  # retract this word's pairs
                pair_count[(a, b)] -= c
                if pair_count[(a, b)] <= 0:
                    del pair_count[(a, b)]
            out, k = [], 0
            while k < len(syms):
                if k + 1 < len(syms) and (syms[k], syms[k + 1]) == best:
                    out.append(merged)
                    k += 2
                else:
                    out.append(syms[k])
                    k += 1
            words[i] = (out, c)
            for a, b in zip(out, out[1:]):  # add the new pairs back
                pair_count[(a, b)] += c
                where[(a, b)].add(i)
    return merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("tokenizer_config")
    ap.add_argument("out_dir")
    ap.add_argument("--merges", type=int, default=4000, help="upper bound; training stops early when no pair is left")
    args = ap.parse_args()

    with open(args.corpus, encoding="utf-8") as f:
        text = f.read()
    # Let the corpus also teach CRLF pairs without storing CR bytes in the text file.
    text += text.replace("\n", "\r\n")[:2000]
    b2u = bytes_to_unicode()
    words = Counter()
    for piece in TRAINING_SPLIT.findall(text):
        words[tuple(b2u[b] for b in piece.encode("utf-8"))] += 1
    merges = train(words, args.merges)

    with open(args.tokenizer_config, encoding="utf-8") as f:
        config = json.load(f)
    added = []
    for id_text, t in sorted(config["added_tokens_decoder"].items(), key=lambda kv: int(kv[0])):
        added.append({"id": int(id_text), "content": t["content"], "single_word": t["single_word"],
                      "lstrip": t["lstrip"], "rstrip": t["rstrip"], "normalized": t["normalized"],
                      "special": t["special"]})

    vocab = {t["content"]: t["id"] for t in added}
    next_id = FIRST_BYTE_ID
    for b in range(256):
        vocab[b2u[b]] = next_id
        next_id += 1
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = next_id
            next_id += 1
    for w in WHOLE_WORD_ONLY:
        assert w not in vocab, w
        vocab[w] = next_id
        next_id += 1
    assert next_id <= min(t["id"] for t in added if t["id"] >= FIRST_BYTE_ID), "vocab overlaps added ids"

    bos = config["bos_token"]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LFM2_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}}]},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": True,
                  "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
                  "merges": [f"{a} {b}" for a, b in merges]},
    }
    with open(os.path.join(args.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    print(f"{len(merges)} merges, {len(vocab)} vocab entries, max id {max(vocab.values())}")


if __name__ == "__main__":
    main()
