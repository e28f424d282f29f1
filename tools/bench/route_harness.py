#!/usr/bin/env python3
"""Routing harness for the replicas benchmark (scripts/replicas_bench.sh): a test instrument, not a router.

Replays a chat trace (tools/bench/chat_trace.py) against N `lfm serve` replicas, choosing each
request's replica by one policy:
  round-robin   replicas in turn
  least-queue   fewest lfm:num_requests_waiting, then running (scraped from /metrics every
                --scrape-ms, as the inference gateway's endpoint picker scrapes), then fewest of
                this harness's own requests in flight
  precise       llm-d's precise prefix-cache scorer: the most consecutive leading prompt blocks
                held by the replica, from an index kept from every replica's KV-cache events
                (tools/bench/kv_index.py); ties by least-queue's order
  precise-load  llm-d's precise-prefix-cache guide profile: precise (min-max normalised) × 3 +
                queue × 2 + KV-cache utilisation × 2, highest sum wins (ties: least-queue's order)
Every policy subscribes to the events (so each run also reports how well the index predicted the
cached tokens the replicas reported).

Clients: --concurrency users, each taking the next conversation of the trace and sending its turns
one after the other (streamed chat completions, max_tokens --max-tokens, ignore_eos). Prompts are
rendered with the model's chat template (jinja2, as `lfm serve` renders it) and tokenized by the
replicas' /tokenize before the run, so the router knows every prompt's token ids; the harness
checks the count against each response's usage.prompt_tokens.

Per run it writes a JSON record (--out); --table FILE... prints the records as a markdown table.

    python3 tools/bench/route_harness.py --replicas http://127.0.0.1:18801,... \
        --events tcp://127.0.0.1:18901,... --policy precise --model-dir DIR [trace options] --out r.json
    python3 tools/bench/route_harness.py --table r1.json r2.json ...
    python3 tools/bench/route_harness.py --self-test
"""
import argparse
import hashlib
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_trace  # noqa: E402
import kv_index  # noqa: E402

POLICIES = ("round-robin", "least-queue", "precise", "precise-load")


def percentile(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def http_json(url, path, body=None, timeout=60):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        res = conn.getresponse()
        data = res.read()
        if res.status != 200:
            raise RuntimeError(f"{url}{path}: HTTP {res.status}: {data[:300]!r}")
        return data
    finally:
        conn.close()


# --- chat template ------------------------------------------------------------------------------

def load_template(model_dir):
    """The model folder's chat template and BOS text, as `lfm serve` reads them (chat_template.jinja,
    else tokenizer_config.json's chat_template)."""
    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    jinja_path = os.path.join(model_dir, "chat_template.jinja")
    if os.path.exists(jinja_path):
        src = open(jinja_path, encoding="utf-8").read()
    elif isinstance(cfg.get("chat_template"), str):
        src = cfg["chat_template"]
    else:
        raise SystemExit(f"route_harness: no chat template in {model_dir}")
    bos = cfg.get("bos_token", "")
    if isinstance(bos, dict):
        bos = bos.get("content", "")
    import jinja2.sandbox  # Debian's python3-jinja2 (scripts/setup.sh)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    tpl = env.from_string(src)
    return lambda msgs: tpl.render(messages=msgs, bos_token=bos, add_generation_prompt=True, tools=None)


def tokenize_trace(trace, render, url, cache_path=None):
    """Token ids of every request's rendered prompt: {(conv, turn): [ids]} (the template writes the
    BOS itself, so add_special is off, as the server's chat path encodes)."""
    key = json.dumps([trace["systems"], [c["turns"] for c in trace["conversations"]]])
    digest = hashlib.sha256(key.encode()).hexdigest()
    if cache_path and os.path.exists(cache_path):
        saved = json.load(open(cache_path))
        if saved.get("digest") == digest:
            return {tuple(map(int, k.split(","))): v for k, v in saved["tokens"].items()}
    out = {}
    for c in trace["conversations"]:
        for k in range(len(c["turns"])):
            text = render(chat_trace.messages(trace, c, k))
            ids = json.loads(http_json(url, "/tokenize", {"content": text, "add_special": False}))["tokens"]
            out[(c["id"], k)] = ids
    if cache_path:
        json.dump({"digest": digest, "tokens": {f"{a},{b}": v for (a, b), v in out.items()}}, open(cache_path, "w"))
    return out


# --- replicas: metrics and events ---------------------------------------------------------------

class Replica:
    def __init__(self, idx, url, events, replay=""):
        self.idx, self.url, self.events, self.replay = idx, url, events, replay
        self.waiting = self.running = 0.0
        self.kv_usage = 0.0
        self.inflight = 0   # this harness's requests not yet answered
        self.last_seq = None
        self.seq_gaps = 0
        self.replayed = 0   # batches fetched from the replay socket after a gap
        self.batches = 0


def parse_metrics(text):
    vals = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, rest = line.partition(" ")
        try:
            vals[name.split("{")[0]] = float(rest.split()[0])
        except (ValueError, IndexError):
            pass
    return vals


def scrape_loop(replicas, period, stop):
    while not stop.is_set():
        for r in replicas:
            try:
                m = parse_metrics(http_json(r.url, "/metrics", timeout=5).decode())
                r.waiting = m.get("lfm:num_requests_waiting", 0.0)
                r.running = m.get("lfm:num_requests_running", 0.0)
                r.kv_usage = m.get("lfm:kv_cache_usage_perc", 0.0)
            except (OSError, RuntimeError):
                pass  # a replica busy past the timeout keeps its last figures
        stop.wait(period)


def fetch_replay(endpoint, start, stop_before, timeout_ms=2000):
    """Batches start..stop_before-1 from a replica's replay ROUTER (docs/design/kv_events.md: send
    the first sequence number wanted, 8 bytes big-endian; get [seq, payload] messages, oldest first,
    then seq -1); returns [(seq, payload)], those the replica still buffers."""
    import zmq
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    out = []
    try:
        s.send_multipart([b"", start.to_bytes(8, "big")])
        while s.poll(timeout_ms):
            frames = s.recv_multipart()
            frames = frames[1:] if frames and frames[0] == b"" else frames
            seq = int.from_bytes(frames[0], "big", signed=True)
            if seq < 0:
                break
            if start <= seq < stop_before:
                out.append((seq, frames[1]))
    finally:
        s.close()
    return out


def subscribe_loop(replicas, index, stop, ready):
    """One SUB socket per replica (the replica is known by its socket); frames [topic, seq, payload].
    A gap in a replica's sequence numbers is filled from its replay socket when it has one (the
    first batch seen counts from 0: a subscriber that joined late replays what it missed)."""
    import msgpack  # Debian's python3-msgpack
    import zmq      # Debian's python3-zmq
    ctx = zmq.Context.instance()
    poller = zmq.Poller()
    socks = {}
    for r in replicas:
        s = ctx.socket(zmq.SUB)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        s.connect(r.events)
        poller.register(s, zmq.POLLIN)
        socks[s] = r

    def apply(r, payload):
        _, events = kv_index.decode_batch(msgpack.unpackb(payload, raw=False, strict_map_key=False))
        index.apply(r.idx, events)
        r.batches += 1

    ready.set()
    try:
        while not stop.is_set():
            for s, _ in poller.poll(100):
                frames = s.recv_multipart()
                r = socks[s]
                if len(frames) < 2:
                    continue
                payload = frames[-1]
                if len(frames) >= 3 and len(frames[-2]) == 8:
                    seq = int.from_bytes(frames[-2], "big")
                    expected = 0 if r.last_seq is None else r.last_seq + 1
                    if seq > expected:
                        r.seq_gaps += 1
                        if r.replay:
                            for _, missed in fetch_replay(r.replay, expected, seq):
                                apply(r, missed)
                                r.replayed += 1
                    r.last_seq = seq
                apply(r, payload)
    finally:
        for s in socks:
            s.close(linger=0)


# --- policies -------------------------------------------------------------------------------------

class Router:
    def __init__(self, policy, replicas, index):
        self.policy, self.replicas, self.index = policy, replicas, index
        self.lock = threading.Lock()
        self.rr = 0

    def _load_key(self, r):
        return (r.waiting, r.running, r.inflight)

    def pick(self, hashes):
        """Returns (replica, its index score in blocks) and counts the request in flight there."""
        with self.lock:
            scores = self.index.score(hashes)
            reps = self.replicas
            order = [reps[(self.rr + i) % len(reps)] for i in range(len(reps))]  # rotating tie order
            self.rr += 1
            if self.policy == "round-robin":
                best = order[0]
            elif self.policy == "least-queue":
                best = min(order, key=self._load_key)
            elif self.policy == "precise":
                best = min(order, key=lambda r: (-scores[r.idx],) + self._load_key(r))
            else:  # precise-load: the guide's weighted sum of normalised scorer outputs
                def norm(vals, invert=False):
                    lo, hi = min(vals), max(vals)
                    if hi == lo:
                        return [1.0] * len(vals)
                    return [((hi - v) if invert else (v - lo)) / (hi - lo) for v in vals]
                pref = norm([scores[r.idx] for r in reps])
                queue = norm([r.waiting for r in reps], invert=True)
                total = {r.idx: 3 * pref[i] + 2 * queue[i] + 2 * (1 - r.kv_usage) for i, r in enumerate(reps)}
                best = min(order, key=lambda r: (-total[r.idx],) + self._load_key(r))
            best.inflight += 1
            return best, scores[best.idx]

    def done(self, r):
        with self.lock:
            r.inflight -= 1


# --- the run --------------------------------------------------------------------------------------

def stream_chat(url, model, msgs, max_tokens, timeout=600):
    """One streamed chat completion → (ttft s, total s, usage); usage from the last chunk."""
    u = urllib.parse.urlparse(url)
    body = {"messages": msgs, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:300]!r}")
    ttft, usage = None, None
    for raw in res:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        ev = json.loads(data)
        if "error" in ev:
            raise RuntimeError(f"stream error: {ev['error']}")
        if ttft is None and ev.get("choices"):
            ttft = time.perf_counter() - t0  # the first chunk is sent with the first token
        if ev.get("usage"):
            usage = ev["usage"]
    total = time.perf_counter() - t0
    conn.close()
    if ttft is None or usage is None:
        raise RuntimeError("a stream ended without tokens or usage")
    return ttft, total, usage


def run(args):
    urls = args.replicas.split(",")
    events = args.events.split(",")
    if len(urls) != len(events):
        raise SystemExit("route_harness: --replicas and --events must list the same number of endpoints")
    trace = chat_trace.trace_from_args(args)
    render = load_template(args.model_dir)
    t_tok = time.perf_counter()
    tokens = tokenize_trace(trace, render, urls[0], args.token_cache)
    t_tok = time.perf_counter() - t_tok
    replays = args.replay.split(",") if args.replay else [""] * len(urls)
    if len(replays) != len(urls):
        raise SystemExit("route_harness: --replay must list one endpoint per replica")
    replicas = [Replica(i, u, e, p) for i, u, e, p in zip(range(len(urls)), urls, events, replays)]
    index = kv_index.PrefixIndex(len(replicas), args.block_size, args.hash_seed)
    stop, ready = threading.Event(), threading.Event()
    threads = [threading.Thread(target=subscribe_loop, args=(replicas, index, stop, ready), daemon=True),
               threading.Thread(target=scrape_loop, args=(replicas, args.scrape_ms / 1000, stop), daemon=True)]
    for t in threads:
        t.start()
    ready.wait(10)
    time.sleep(0.5)  # a SUB socket drops what is published before its connection is up
    router = Router(args.policy, replicas, index)
    queue = list(trace["conversations"])
    qlock = threading.Lock()
    records, errors = [], []

    def user():
        while True:
            with qlock:
                if not queue:
                    return
                conv = queue.pop(0)
            for k in range(len(conv["turns"])):
                ids = tokens[(conv["id"], k)]
                hashes = kv_index.block_hashes(ids, args.block_size, args.hash_seed)
                rep, score = router.pick(hashes)
                try:
                    ttft, total, usage = stream_chat(rep.url, args.model, chat_trace.messages(trace, conv, k),
                                                     args.max_tokens)
                except (OSError, RuntimeError) as e:
                    errors.append(f"{rep.url}: {e}")
                    continue
                finally:
                    router.done(rep)
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                records.append({"replica": rep.idx, "ttft": ttft, "total": total, "prompt": usage["prompt_tokens"],
                                "cached": cached, "predicted": score * args.block_size, "ids": len(ids),
                                "completion": usage.get("completion_tokens", 0), "end": time.perf_counter()})

    t0 = time.perf_counter()
    users = [threading.Thread(target=user) for _ in range(args.concurrency)]
    for t in users:
        t.start()
    for t in users:
        t.join()
    wall = time.perf_counter() - t0
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(5)
    prompt = sum(r["prompt"] for r in records)
    cached = sum(r["cached"] for r in records)
    ttfts = [r["ttft"] * 1000 for r in records]
    result = {
        "policy": args.policy, "replicas": len(replicas), "concurrency": args.concurrency,
        "requests": len(records), "errors": len(errors), "error_samples": errors[:3],
        "prompt_tokens": prompt, "cached_tokens": cached, "prefill_tokens": prompt - cached,
        "hit_rate": cached / prompt if prompt else 0.0,
        "ttft_p50_ms": percentile(ttfts, 50), "ttft_p99_ms": percentile(ttfts, 99), "wall_s": wall,
        "requests_per_s": len(records) / wall if wall else 0.0,
        "prompt_tokens_per_s": prompt / wall if wall else 0.0,
        "generated_tokens": sum(r["completion"] for r in records),
        "per_replica": [sum(1 for r in records if r["replica"] == i) for i in range(len(replicas))],
        "token_count_mismatches": sum(1 for r in records if r["prompt"] != r["ids"]),
        "index_exact": sum(1 for r in records if r["predicted"] == r["cached"]),
        "index_over": sum(1 for r in records if r["predicted"] > r["cached"]),
        "index_under": sum(1 for r in records if r["predicted"] < r["cached"]),
        "events": dict(index.stats, batches=sum(r.batches for r in replicas),
                       seq_gaps=sum(r.seq_gaps for r in replicas),
                       replayed=sum(r.replayed for r in replicas)),
        "tokenize_s": t_tok,
    }
    if args.out:
        json.dump(result, open(args.out, "w"), indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "error_samples"}))
    if errors:
        print(f"route_harness: {len(errors)} request(s) failed, e.g. {errors[0]}", file=sys.stderr)
    return result


def table(paths):
    rows = [json.load(open(p)) for p in paths]
    out = ["| policy | requests | prefix-cache hit rate | prefill tokens computed | TTFT p50 | TTFT p99 | "
           "throughput | requests per replica | index predicted exactly |",
           "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        out.append(f"| {r['policy']} | {r['requests']}{' (' + str(r['errors']) + ' failed)' if r['errors'] else ''} | "
                   f"{100 * r['hit_rate']:.1f}% | {r['prefill_tokens']:,} of {r['prompt_tokens']:,} | "
                   f"{r['ttft_p50_ms']:.0f} ms | {r['ttft_p99_ms']:.0f} ms | {r['requests_per_s']:.2f} req/s "
                   f"({r['prompt_tokens_per_s']:,.0f} prompt tok/s) | {'/'.join(map(str, r['per_replica']))} | "
                   f"{100 * r['index_exact'] / max(1, r['requests']):.0f}% |")
    base = next((r for r in rows if r["policy"] == "round-robin"), None)
    if base:
        out.append("")
        for r in rows:
            if r is not base and r["prefill_tokens"]:
                out.append(f"- {r['policy']}: {base['prefill_tokens'] / r['prefill_tokens']:.1f}x fewer prefill "
                           f"tokens than round-robin, TTFT p50 {base['ttft_p50_ms'] / max(1e-9, r['ttft_p50_ms']):.1f}x "
                           "lower")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check the scorer on synthetic events and exit")
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print result files as a markdown table and exit")
    ap.add_argument("--replicas", help="comma-separated base URLs")
    ap.add_argument("--events", help="comma-separated ZeroMQ endpoints of the replicas' KV events, same order")
    ap.add_argument("--replay", default="", help="comma-separated replay (ROUTER) endpoints, same order; optional")
    ap.add_argument("--policy", choices=POLICIES, default="precise")
    ap.add_argument("--model-dir", help="folder with the chat template and tokenizer_config.json")
    ap.add_argument("--model", default="", help="the requests' model field (default: none)")
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=16, help="the replicas' --kv-block-size")
    ap.add_argument("--hash-seed", default="", help="the replicas' hash seed (docs/design/kv_events.md)")
    ap.add_argument("--scrape-ms", type=float, default=50)
    ap.add_argument("--token-cache", help="file keeping the trace's token ids between runs")
    ap.add_argument("--out", help="write the JSON record here")
    chat_trace.add_trace_args(ap)
    args = ap.parse_args()
    if args.self_test:
        import route_selftest
        sys.exit(route_selftest.main())
    if args.table:
        print(table(args.table))
        return
    if not (args.replicas and args.events and args.model_dir):
        ap.error("--replicas, --events and --model-dir are required for a run")
    run(args)


if __name__ == "__main__":
    main()
