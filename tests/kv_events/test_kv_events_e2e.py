"""End to end: `lfm serve --kv-events` on the bundled tiny model, read by an independent decoder
(Debian's python3-zmq and python3-msgpack; the block hash recomputed here with hashlib and a small
CBOR encoder, by the rule of docs/design/kv_events.md).

Checks that the events reproduce the prefix cache: every stored block announced once (a repeated
prompt announces nothing new), evictions announced when the small cache fills, the announced
blocks equal to what the server reports cached, a prompt's blocks found by the hashes of its
tokens, a missed batch returned by the replay socket, and AllBlocksCleared after
POST /reset_prefix_cache (which needs the API key).
Run by ctest (KvEvents.EndToEnd) with LFM_BIN set to the lfm binary.
"""
import hashlib
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

zmq = pytest.importorskip("zmq", reason="python3-zmq is missing (scripts/setup.sh installs it)")
msgpack = pytest.importorskip("msgpack", reason="python3-msgpack is missing (scripts/setup.sh installs it)")

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "tiny-lfm2"
KEY = "kv-secret"
BLOCK = 16
TOPIC = "kv@pod-a@tiny-lfm2"


# ---- the hash rule, independently ----

def _head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for ai, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes([major << 5 | ai]) + n.to_bytes(width, "big")
    raise ValueError(n)


def block_hashes(tokens, seed=""):
    s = seed.encode()
    d = hashlib.sha256(_head(3, len(s)) + s).digest()
    out = []
    for i in range(0, len(tokens) - BLOCK + 1, BLOCK):
        t = tokens[i:i + BLOCK]
        enc = _head(4, 3) + _head(2, 32) + d + _head(4, len(t)) + b"".join(_head(0, x) for x in t) + b"\xf6"
        d = hashlib.sha256(enc).digest()
        out.append(int.from_bytes(d[-8:], "big"))
    return out


# ---- the server ----

class Server:
    def __init__(self, tmp, events="tcp://127.0.0.1:*"):
        self.log = open(tmp / "serve.log", "w+")
        cmd = [os.environ.get("LFM_BIN", str(ROOT / "build" / "lfm")), "serve", "-m", str(MODEL), "--port", "0",
               "--host", "127.0.0.1", "--ctx-size", "128", "--parallel", "1", "--api-key", KEY, "--no-access-log",
               "--kv-events", events, "--kv-events-replay", "tcp://127.0.0.1:*",
               "--kv-events-topic", TOPIC]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.p.stdout.readline()  # "probes on …" while the model loads, then "listening on …"
        while line.startswith("probes on "):
            line = self.p.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            self.p.kill()
            self.log.seek(0)
            raise AssertionError("lfm serve did not start: " + line + self.log.read()[-3000:])
        self.url = m.group(1)
        self.log.seek(0)
        text = self.log.read()
        m = re.search(r"KV-cache events on (\S+) \((?:bound|connected); topic \"([^\"]*)\", blocks of (\d+), "
                      r"medium (\w+)\), replay on (\S+)", text)
        assert m, text
        self.pub, topic, block, self.medium, self.replay = m.group(1), m.group(2), int(m.group(3)), m.group(4), m.group(5)
        assert topic == TOPIC and block == BLOCK and self.medium == "CPU"

    def call(self, path, body=None, key=KEY):
        req = urllib.request.Request(self.url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": "Bearer " + key} if key else {})},
                                     method="POST" if body is not None else "GET")
        with urllib.request.urlopen(req, timeout=60) as r:
            data = r.read().decode()
            return json.loads(data) if r.headers.get_content_type() == "application/json" else data

    def cached_blocks(self):
        text = self.call("/metrics", key=None)
        return int(float(re.search(r"^lfm:kv_blocks_cached (\S+)$", text, re.M).group(1)))

    def complete(self, prompt):
        return self.call("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()


# ---- the subscriber: what an indexer would know ----

class Index:
    def __init__(self):
        self.live = {}        # published hash -> token ids of the block
        self.stored = []      # every BlockStored hash in order
        self.removed = []
        self.cleared = 0
        self.seqs = []

    def apply(self, seq, payload):
        self.seqs.append(seq)
        batch = msgpack.unpackb(payload, raw=False)
        assert isinstance(batch, list) and len(batch) == 3, batch  # [ts, events, data_parallel_rank]
        ts, events, rank = batch
        assert isinstance(ts, float) and abs(ts - time.time()) < 600 and rank == 0
        assert events, "an empty batch was published"
        for e in events:
            tag = e[0]
            if tag == "BlockStored":
                assert len(e) == 8, e
                _, hashes, parent, tokens, block_size, lora_id, medium, lora_name = e
                assert block_size == BLOCK and lora_id is None and lora_name is None and medium == "CPU"
                assert len(tokens) == BLOCK * len(hashes)
                # The parent is announced and still cached (the indexer drops a block whose parent it
                # does not know), or this is a first block.
                assert parent is None or parent in self.live, (parent, e)
                for i, h in enumerate(hashes):
                    assert isinstance(h, int) and 0 <= h < 2**64
                    assert h not in self.live, f"block {h} announced twice"
                    self.live[h] = tokens[i * BLOCK:(i + 1) * BLOCK]
                    self.stored.append(h)
            elif tag == "BlockRemoved":
                assert len(e) == 3 and e[2] == "CPU", e
                for h in e[1]:
                    assert h in self.live, f"block {h} removed but not announced"
                    del self.live[h]
                    self.removed.append(h)
            elif tag == "AllBlocksCleared":
                assert len(e) == 1
                self.live.clear()
                self.cleared += 1
            else:
                raise AssertionError(f"unknown event {e!r}")


def receive(sock, index, quiet=0.6, limit=20.0):
    """Applies every message until none came for `quiet` seconds."""
    end = time.time() + limit
    while time.time() < end:
        if not sock.poll(int(quiet * 1000)):
            return
        topic, seq, payload = sock.recv_multipart()
        assert topic.decode() == TOPIC and len(seq) == 8
        index.apply(int.from_bytes(seq, "big"), payload)


def settle(srv, index, sock, want_cached=None):
    """Waits until the server's cached-block gauge equals the live announced blocks."""
    for _ in range(50):
        receive(sock, index, quiet=0.2)
        if srv.cached_blocks() == len(index.live) and (want_cached is None or len(index.live) == want_cached):
            return
        time.sleep(0.1)
    assert srv.cached_blocks() == len(index.live), (srv.cached_blocks(), len(index.live))


@pytest.fixture()
def served(tmp_path):
    srv = Server(tmp_path)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(srv.pub)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    time.sleep(0.3)  # the subscription reaches the publisher (nothing is published before a request)
    yield srv, ctx, sub
    sub.close(0)
    ctx.term()
    srv.stop()


def test_events_reproduce_the_prefix_cache(served):
    srv, ctx, sub = served
    index = Index()

    # A text prompt: its token ids from /tokenize, its block hashes computed here.
    text = "The quick brown fox jumps over the lazy dog. " * 6
    ids = srv.call("/tokenize", {"content": text})["tokens"]
    assert len(ids) >= 3 * BLOCK, len(ids)
    out = srv.complete(text)
    assert out["usage"]["prompt_tokens"] == len(ids)
    settle(srv, index, sub)
    want = block_hashes(ids)
    assert want and all(h in index.live for h in want), (want, index.stored)
    for h, i in zip(want, range(0, len(ids), BLOCK)):
        assert index.live[h] == ids[i:i + BLOCK]
    # The same prompt again is served from the cache: nothing new is announced.
    n_stored = len(index.stored)
    srv.complete(text)
    settle(srv, index, sub)
    assert len(index.stored) == n_stored
    # A different seed gives other hashes (the indexer and the server must agree on it).
    assert not set(block_hashes(ids, seed="1")) & set(index.live)

    # Distinct prompts of 6 blocks each overflow the 8-block pool: evictions are announced.
    for k in range(4):
        prompt = [100 + 7 * k + (i * 13) % 50 for i in range(6 * BLOCK + 3)]
        srv.complete(prompt)
        settle(srv, index, sub)
        assert all(h in index.live for h in block_hashes(prompt)), k  # the latest prompt stays cached
    assert index.removed, "no eviction was announced"
    assert len(index.live) == srv.cached_blocks() <= 8

    # A missed batch: the subscriber is away while a prompt is served, then asks the replay socket.
    last = index.seqs[-1]
    sub.close(0)
    away = [900 + (i * 5) % 70 for i in range(2 * BLOCK + 1)]
    srv.complete(away)
    time.sleep(0.5)
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(srv.replay)
    dealer.send_multipart([b"", (last + 1).to_bytes(8, "big")])
    replayed = []
    while True:
        assert dealer.poll(5000), "no replay answer"
        empty, seq, payload = dealer.recv_multipart()
        assert empty == b""
        if seq == b"\xff" * 8:
            assert payload == b""
            break
        replayed.append(int.from_bytes(seq, "big"))
        index.apply(replayed[-1], payload)
    dealer.close(0)
    assert replayed and replayed[0] == last + 1 and replayed == list(range(last + 1, last + 1 + len(replayed)))
    assert all(h in index.live for h in block_hashes(away))
    assert srv.cached_blocks() == len(index.live)

    # The flush: behind the API key, then AllBlocksCleared and an empty cache.
    sub = ctx.socket(zmq.SUB)
    sub.connect(srv.pub)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    time.sleep(0.3)
    with pytest.raises(urllib.error.HTTPError) as e:
        srv.call("/reset_prefix_cache", {}, key=None)
    assert e.value.code == 401
    assert srv.call("/reset_prefix_cache", {}) == {"status": "ok"}
    receive(sub, index)
    assert index.cleared == 1 and not index.live
    assert srv.cached_blocks() == 0
    # Sequence numbers have no gaps across the live stream and the replay.
    assert index.seqs == list(range(len(index.seqs)))  # the first batch is 0

    # After the flush the prompt's blocks are computed and announced again.
    srv.complete(text)
    settle(srv, index, sub)
    assert all(h in index.live for h in want)
    sub.close(0)


def test_llm_d_arrangement_the_subscriber_binds_and_the_server_connects(tmp_path):
    """llm-d's indexer binds its SUB socket; an endpoint without '*' makes lfm connect to it."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    srv = Server(tmp_path, events=f"tcp://127.0.0.1:{port}")
    try:
        sub.poll(500)  # a bound SUB sends its subscription once its thread serves the new connection
        prompt = [200 + (i * 11) % 90 for i in range(2 * BLOCK + 5)]
        srv.complete(prompt)
        index = Index()
        receive(sub, index)
        assert index.seqs and index.seqs[0] == 0
        assert index.stored == block_hashes(prompt)
    finally:
        sub.close(0)
        ctx.term()
        srv.stop()
