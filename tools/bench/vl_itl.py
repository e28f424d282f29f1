#!/usr/bin/env python3
"""Inter-token gaps of a streaming text request while an image request arrives beside it.

usage: vl_itl.py PORT IMAGE.png   (an `lfm serve` of an LFM2-VL model with a chat template)
One greedy chat stream of 200 tokens; 2 s into it, a chat request with the image (4 tokens).
Prints the longest, p99 and median gaps between the stream's chunks and the image request's time.
"""
import json, time, threading, urllib.request, base64, sys
port = int(sys.argv[1]); img = sys.argv[2]
url = f"http://127.0.0.1:{port}/v1/chat/completions"
gaps = []; done = threading.Event()
def text_stream():
    body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 200, "stream": True, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    last = None
    with urllib.request.urlopen(req) as r:
        for line in r:
            if not line.startswith(b"data:") or b"[DONE]" in line: continue
            now = time.time()
            if last is not None: gaps.append(now - last)
            last = now
    done.set()
t = threading.Thread(target=text_stream); t.start()
time.sleep(2.0)
b64 = base64.b64encode(open(img, "rb").read()).decode()
body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64}}, {"type": "text", "text": "Describe this image."}]}], "max_tokens": 4, "temperature": 0}
t0 = time.time()
req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
resp = json.loads(urllib.request.urlopen(req).read())
t1 = time.time()
t.join()
gaps.sort()
print(f"image request {t1-t0:.2f} s; text stream: {len(gaps)+1} chunks, max gap {gaps[-1]*1000:.0f} ms, p99 {gaps[int(len(gaps)*0.99)]*1000:.0f} ms, median {gaps[len(gaps)//2]*1000:.0f} ms; usage {resp.get('usage')}")
