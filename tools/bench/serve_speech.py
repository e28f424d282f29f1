#!/usr/bin/env python3
"""Served speech output: N concurrent requests against a running `lfm serve`, each with a distinct text;
reports audio seconds produced per wall second over all streams, each request's latency and (TTS) its first
audio bytes. Standard library only.
  chat (default): spoken-chat requests (chat completions, modalities text+audio, interleaved), pcm16.
  --tts: /v1/audio/speech, raw pcm streamed as it is made; --speak-now opens the turn with <|audio_start|>
         (random weights never choose it themselves); --max-seconds caps each answer (the server's
         --max-speech-seconds must allow it).

    build/lfm serve -m MODEL.gguf --mmproj MMPROJ.gguf --vocoder VOCODER.gguf --parallel 8 -t 2 --port 8090 &
    python3 tools/bench/serve_speech.py --port 8090 --streams 8 --max-tokens 54
    python3 tools/bench/serve_speech.py --port 8090 --streams 8 --tts --speak-now
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


def one_tts(port, i, speak_now, seed, out):
    body = {"model": "", "input": f"Sentence number {i}: the quick brown fox jumps over the lazy dog.",
            "voice": "us_female", "response_format": "pcm", "speak_now": speak_now}
    if seed is not None:
        body["seed"] = seed + i
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/audio/speech", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, n = None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            if first is None:
                first = time.perf_counter() - t0
            n += len(chunk)
    out[i] = (time.perf_counter() - t0, n / 2 / 24000.0, first)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=54)
    ap.add_argument("--tts", action="store_true", help="/v1/audio/speech instead of spoken chat")
    ap.add_argument("--speak-now", action="store_true", help="TTS: the answer opens with <|audio_start|>")
    ap.add_argument("--seed", type=int, default=None, help="TTS: stream i samples with seed SEED + i (random weights "
                    "may draw the end-of-audio frame early and then write text: a seed makes runs comparable)")
    a = ap.parse_args()
    out = {}
    t0 = time.perf_counter()
    if a.tts:
        threads = [threading.Thread(target=one_tts, args=(a.port, i, a.speak_now, a.seed, out)) for i in range(a.streams)]
    else:
        threads = [threading.Thread(target=one, args=(a.port, i, a.max_tokens, out)) for i in range(a.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    audio = sum(v[1] for v in out.values())
    lat = [v[0] for v in out.values()]
    res = {"mode": "tts" if a.tts else "chat", "streams": a.streams, "audio_seconds": round(audio, 2),
           "wall_seconds": round(wall, 2), "audio_seconds_per_second": round(audio / wall, 3),
           "latency_median_s": round(statistics.median(lat), 2), "latency_max_s": round(max(lat), 2)}
    if a.tts:
        firsts = [v[2] for v in out.values() if v[2] is not None]
        res["first_audio_median_s"] = round(statistics.median(firsts), 2) if firsts else None
    print(json.dumps(res))


if __name__ == "__main__":
    main()
