#!/usr/bin/env python3
"""Served speech output: N concurrent spoken-chat requests (modalities text+audio, interleaved) against a
running `lfm serve`, each with a distinct question; reports audio seconds produced per wall second over all
streams and each request's latency. Standard library only.

    build/lfm serve -m MODEL.gguf --mmproj MMPROJ.gguf --vocoder VOCODER.gguf --parallel 8 -t 2 --port 8090 &
    python3 tools/bench/serve_speech.py --port 8090 --streams 8 --max-tokens 54
"""
import argparse
import base64
import json
import statistics
import threading
import time
import urllib.request


def one(port, i, max_tokens, out):
    body = {"modalities": ["text", "audio"], "audio": {"voice": "us_female", "format": "pcm16"},
            "max_tokens": max_tokens, "messages": [{"role": "user", "content": f"Question number {i}: how are you today?"}]}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        reply = json.load(r)
    dt = time.perf_counter() - t0
    pcm = base64.b64decode(reply["choices"][0]["message"]["audio"]["data"])
    out[i] = (dt, len(pcm) / 2 / 24000.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=54)
    a = ap.parse_args()
    out = {}
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(a.port, i, a.max_tokens, out)) for i in range(a.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    audio = sum(s for _, s in out.values())
    lat = [d for d, _ in out.values()]
    print(json.dumps({"streams": a.streams, "audio_seconds": round(audio, 2), "wall_seconds": round(wall, 2),
                      "audio_seconds_per_second": round(audio / wall, 3),
                      "latency_median_s": round(statistics.median(lat), 2), "latency_max_s": round(max(lat), 2)}))


if __name__ == "__main__":
    main()
