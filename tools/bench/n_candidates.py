#!/usr/bin/env python3
"""Time of one /v1/completions request with n = 4 sampled candidates over a random prompt.

usage: n_candidates.py PORT PROMPT_TOKENS   (an `lfm serve` with --parallel 4 or more)
"""
import json, time, urllib.request, random, sys
port=int(sys.argv[1]); random.seed(7)
ids=[random.randrange(100, 60000) for _ in range(int(sys.argv[2]))]
body={"prompt": ids, "n": 4, "max_tokens": 16, "temperature": 0.8, "seed": 1}
t0=time.time()
r=json.loads(urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), {"Content-Type":"application/json"})).read())
t1=time.time()
print(f"n=4 over a {len(ids)}-token prompt: {t1-t0:.2f} s; usage {r['usage']}")
