#!/usr/bin/env python3
"""Served rerank latency: POST /v1/rerank with one query and DOCS documents of about TOKENS tokens
each (random words of a word list), REPEATS times one after another; prints one JSON object with
the median and each run's seconds. Also /v1/embeddings of the same documents (the index side:
token vectors per second for ColBERT, documents per second for a dense model).

    rerank_latency.py URL --words FILE [--docs 100] [--tokens 256] [--repeats 5]

The server must hold a retriever with a tokenizer (URL like http://127.0.0.1:8080).
"""
import argparse
import json
import random
import statistics
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as r:
        out = json.loads(r.read())
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--words", required=True, help="a text file; its whitespace-separated words make the documents")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    words = open(a.words, encoding="utf-8").read().split()
    rng = random.Random(a.seed)

    def text(n_tokens):
        # Grow a document until the server's tokenizer says it has about n_tokens tokens.
        out = []
        while True:
            out.extend(rng.choice(words) for _ in range(16))
            t, _ = post(a.url + "/tokenize", {"content": " ".join(out), "add_special": False})
            if t["count"] >= n_tokens:
                return " ".join(out)

    docs = [text(a.tokens) for _ in range(a.docs)]
    query = text(16)
    body = {"query": query, "documents": docs}
    post(a.url + "/v1/rerank", body)  # warm-up
    rerank = [post(a.url + "/v1/rerank", body)[1] for _ in range(a.repeats)]
    emb, tokens = [], 0
    for _ in range(a.repeats):
        out, s = post(a.url + "/v1/embeddings", {"input": docs, "input_type": "document"})
        emb.append(s)
        tokens = out["usage"]["prompt_tokens"]
    print(json.dumps({"docs": a.docs, "tokens_per_doc": a.tokens, "rerank_seconds_median": statistics.median(rerank),
                      "rerank_seconds": rerank, "embeddings_seconds_median": statistics.median(emb),
                      "embedded_tokens": tokens, "embedded_tokens_per_s": tokens / statistics.median(emb)}))


if __name__ == "__main__":
    main()
