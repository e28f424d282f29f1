#!/usr/bin/env python3
"""Documents for the embedding benchmarks: --docs lines of words from a text file, each exactly N
tokens under the model's tokenizer with BOS (N uniform in [--min-tokens, --max-tokens], --seed),
so `lfm bench-embed -f`, `llama-embedding -f` and tools/bench/serve_embed.py read the same input.

    make_embed_docs.py LFM MODEL OUT --words FILE [--docs 256] [--min-tokens 128] [--max-tokens 512]

Token counts add up per word: the tokenizer's pre-tokenizer splits " word" pieces (byte-level BPE,
'Ġ' marks the space), so one `lfm tokenize` call over all the words gives each word's cost.
"""
import argparse
import json
import random
import re
import subprocess
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lfm")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--words", required=True)
    ap.add_argument("--docs", type=int, default=256)
    ap.add_argument("--min-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    words = sorted(set(re.findall(r"[a-z]{2,12}", open(a.words, encoding="utf-8").read())))
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("x " + " ".join(words))
        f.flush()
        out = subprocess.run([a.lfm, "tokenize", "-m", a.model, "--json", "--no-special", "-f", f.name],
                             capture_output=True, text=True, check=True)
    counts = []
    for t in json.loads(out.stdout)["tokens"][1:]:
        if t.startswith("Ġ"):
            counts.append(1)
        else:
            counts[-1] += 1
    if len(counts) != len(words):
        raise SystemExit(f"make_embed_docs: {len(counts)} word costs for {len(words)} words (not a byte-level BPE?)")
    cost = dict(zip(words, counts))
    ones = [w for w in words if cost[w] == 1]
    docs = []
    for _ in range(a.docs):
        target = rng.randint(a.min_tokens, a.max_tokens) - 1  # BOS
        ws, n = [], 0
        while n < target:
            w = rng.choice(words) if target - n > 4 else rng.choice(ones)
            if n + cost[w] <= target:
                ws.append(w)
                n += cost[w]
        docs.append(" ".join(ws))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(docs) + "\n")
    print(f"{len(docs)} documents, {sum(len(d) for d in docs)} bytes")


if __name__ == "__main__":
    main()
