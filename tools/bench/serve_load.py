#!/usr/bin/env python3
"""Serving load in plain Python (for machines without node, such as the lent GPU machine).

N concurrent clients (closed loop: each sends its next request when one ends) stream
/v1/completions with random token-id prompts, greedy, ignore_eos, so every request runs in full.
Prints one JSON object: generated tokens/s over the run, TTFT and inter-token latency
percentiles (ms), and the request count; --out also writes it to a file.

    python3 tools/bench/serve_load.py URL [--concurrency 64] [--requests 192] [--prompt 128 | LO-HI]
                                      [--max-tokens 64] [--vocab 32000] [--seed 1] [--out FILE]
                                      [--wait SECONDS (for /ready first)]

One server-sent event per generated token is assumed (lfm serve sends one per token, text or
not). The same load as tools/server-tests/load.mjs's bench mode, without its llama-server options.
"""
import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def one_request(host, port, prompt, max_tokens):
    """Streams one completion; returns (ttft seconds, [inter-token seconds], tokens)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    conn = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:300]!r}")
    times = []
    for raw in res:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        event = json.loads(data)
        if "error" in event:
            raise RuntimeError(f"stream error: {event['error']}")
        times.append(time.perf_counter())
    conn.close()
    if not times:
        raise RuntimeError("a stream ended without tokens")
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=192)
    ap.add_argument("--prompt", default="128", help="prompt tokens, or LO-HI drawn uniformly")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn below this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--wait", type=float, default=0, help="seconds to wait for the server to be ready (/ready, or /health where there is none)")
    args = ap.parse_args()

    u = urllib.parse.urlparse(args.url)
    deadline = time.monotonic() + args.wait
    while True:
        try:
            # lfm: /ready is 200 once the model is loaded (/health answers while it loads);
            # llama-server has no /ready (404) and its /health is 200 once loaded.
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
            conn.request("GET", "/ready")
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                break
            if r.status == 404:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"serve_load: no server answering at {args.url}")
        time.sleep(0.2)
    rng = random.Random(args.seed)
    lo, _, hi = args.prompt.partition("-")
    lo, hi = int(lo), int(hi or lo)
    jobs = [[rng.randrange(1, args.vocab) for _ in range(rng.randint(lo, hi))] for _ in range(args.requests)]
    results, errors = [], []
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not jobs or errors:
                    return
                prompt = jobs.pop()
            try:
                r = one_request(u.hostname, u.port, prompt, args.max_tokens)
            except Exception as e:  # reported once, and the run stops
                with lock:
                    errors.append(str(e))
                return
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"serve_load: {errors[0]}")
    itl = [x * 1000 for r in results for x in r[1]]
    ttft = [r[0] * 1000 for r in results]
    out = {"concurrency": args.concurrency, "requests": len(results), "prompt": args.prompt,
           "max_tokens": args.max_tokens, "gen_tok_s": round(sum(r[2] for r in results) / wall, 1),
           "run_s": round(wall, 2),
           "ttft_p50_ms": round(percentile(ttft, 50), 1), "ttft_p99_ms": round(percentile(ttft, 99), 1),
           "itl_p50_ms": round(percentile(itl, 50), 2), "itl_p95_ms": round(percentile(itl, 95), 2),
           "itl_p99_ms": round(percentile(itl, 99), 2)}
    print(json.dumps(out))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
