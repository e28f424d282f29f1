#!/usr/bin/env python3
"""Served embedding throughput: POST /v1/embeddings (OpenAI shape) for every line of a file, in
requests of --per-request documents with --concurrency of them in flight; prints one JSON object
with the wall time of all documents (median of --repeats rounds after one warm-up round), the
documents and prompt tokens per second (usage.prompt_tokens, as the server counted them).

    serve_embed.py URL --file DOCS [--per-request 16] [--concurrency 4] [--repeats 3] [--extra JSON]

Works against `lfm serve` on a retriever and llama.cpp's `llama-server --embeddings` alike: the
body is {"input": [...]} plus --extra (e.g. '{"input_type": "document"}' for lfm's prompts).
"""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.error
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"serve_embed: {url}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--file", required=True, help="one document per line (empty lines skipped)")
    ap.add_argument("--per-request", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--extra", default="{}", help="JSON object merged into every request body")
    a = ap.parse_args()
    docs = [l.rstrip("\r") for l in open(a.file, encoding="utf-8").read().split("\n") if l.strip()]
    extra = json.loads(a.extra)
    chunks = [docs[i:i + a.per_request] for i in range(0, len(docs), a.per_request)]

    def one(chunk):
        out = post(a.url + "/v1/embeddings", {"input": chunk, **extra})
        if len(out["data"]) != len(chunk):
            raise SystemExit(f"serve_embed: {len(out['data'])} embeddings for {len(chunk)} inputs")
        return out["usage"]["prompt_tokens"]

    def round_():
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
            tokens = sum(ex.map(one, chunks))
        return time.perf_counter() - t0, tokens

    round_()  # warm-up
    runs = [round_() for _ in range(a.repeats)]
    secs = [s for s, _ in runs]
    med, tokens = statistics.median(secs), runs[0][1]
    print(json.dumps({"docs": len(docs), "prompt_tokens": tokens, "per_request": a.per_request,
                      "concurrency": a.concurrency, "seconds_median": med, "seconds": secs,
                      "docs_per_s": len(docs) / med, "tokens_per_s": tokens / med}))


if __name__ == "__main__":
    main()
