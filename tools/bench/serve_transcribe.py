#!/usr/bin/env python3
"""Served transcription throughput: POST /v1/audio/transcriptions (OpenAI's multipart upload) for
every audio file given, --concurrency of them in flight; prints one JSON object with the wall time
of a round (median of --repeats after one warm-up round), the audio seconds transcribed per wall
second, and each request's latency (median, max).

    serve_transcribe.py URL FILE... [--concurrency 8] [--repeats 3] [--rounds-of N]

Every request uploads the next file, never one already sent: a server that caches encoded audio or
prompt prefixes (lfm does both) must not be measured on repeats, so at least
N · (repeats + 1) distinct files are needed (one round of N per repeat, and the warm-up).

Works against `lfm serve` on an LFM2-Audio model and any OpenAI-compatible transcription server.
The duration of each file is read from its WAV header (WAV files only).
"""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.error
import urllib.request
import uuid
import wave


def multipart(fields, file_name, file_bytes):
    boundary = uuid.uuid4().hex
    parts = []
    for k, v in fields.items():
        parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode())
    parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n".encode() + file_bytes + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def post(url, body, content_type):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"serve_transcribe: {url}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds-of", type=int, default=0, help="requests per round (default: one per file)")
    a = ap.parse_args()
    clips = []
    for f in a.files:
        with wave.open(f, "rb") as w:
            seconds = w.getnframes() / w.getframerate()
        clips.append((f, open(f, "rb").read(), seconds))
    n = a.rounds_of or len(clips) // (a.repeats + 1)
    if n < 1 or n * (a.repeats + 1) > len(clips):
        raise SystemExit(f"serve_transcribe: {len(clips)} files; {n} requests x {a.repeats + 1} rounds need as many "
                         "distinct files")
    rounds = [clips[r * n:(r + 1) * n] for r in range(a.repeats + 1)]

    def one(clip):
        name, data, _ = clip
        body, ctype = multipart({"model": "", "response_format": "json"}, name, data)
        t0 = time.perf_counter()
        out = post(a.url + "/v1/audio/transcriptions", body, ctype)
        if not isinstance(out.get("text"), str):
            raise SystemExit(f"serve_transcribe: no text in {out}")
        return time.perf_counter() - t0

    def round_(work):
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
            lat = list(ex.map(one, work))
        return time.perf_counter() - t0, lat

    round_(rounds[0])  # warm-up
    runs = [round_(w) for w in rounds[1:]]
    secs = [s for s, _ in runs]
    med = statistics.median(secs)
    audio = statistics.median(sum(c[2] for c in w) for w in rounds[1:])
    lat = [x for _, l in runs for x in l]
    print(json.dumps({"requests": n, "audio_seconds": audio, "concurrency": a.concurrency, "seconds_median": med,
                      "seconds": secs, "audio_seconds_per_second": audio / med,
                      "latency_median": statistics.median(lat), "latency_max": max(lat)}))


if __name__ == "__main__":
    main()
