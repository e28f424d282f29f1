#!/usr/bin/env python3
"""Self-check of the replicas benchmark's router (route_harness.py --self-test): no server needed.

Checks the canonical CBOR encoder against RFC 8949's examples, the block-hash chain's properties,
the index and LongestPrefix scorer on a synthetic event stream (vLLM's msgpack layout, through a
real ZeroMQ PUB socket on loopback), and each policy's choice."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv_index  # noqa: E402
import route_harness  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def test_cbor():
    # RFC 8949 Appendix A.
    vectors = [(0, "00"), (23, "17"), (24, "1818"), (100, "1864"), (1000, "1903e8"), (1000000, "1a000f4240"),
               (1000000000000, "1b000000e8d4a51000"), (18446744073709551615, "1bffffffffffffffff"), (-1, "20"),
               (-1000, "3903e7"), (None, "f6"), (False, "f4"), (True, "f5"), ("", "60"), ("a", "6161"),
               ("IETF", "6449455446"), (b"\x01\x02\x03\x04", "4401020304"), ([], "80"),
               ([1, [2, 3], [4, 5]], "8301820203820405"), (list(range(1, 26)),
               "98190102030405060708090a0b0c0d0e0f101112131415161718181819")]
    for value, hexa in vectors:
        check(kv_index.cbor(value).hex() == hexa, f"cbor({value!r}) = {kv_index.cbor(value).hex()}, RFC: {hexa}")


def test_hashes():
    toks = list(range(100, 180))           # 80 tokens: 5 blocks of 16
    h = kv_index.block_hashes(toks, 16)
    check(len(h) == 5, "5 full blocks hashed")
    check(kv_index.block_hashes(toks + [1, 2, 3], 16) == h, "a trailing partial block has no hash")
    check(kv_index.block_hashes(toks[:48], 16) == h[:3], "a prefix's hashes are the prefix of the hashes")
    other = kv_index.block_hashes([99] + toks[1:], 16)
    check(all(a != b for a, b in zip(h, other)), "a different first token changes every block's hash (chained)")
    check(kv_index.block_hashes(toks, 16, seed="42") != h, "the seed changes the root")
    check(h[0] == kv_index.low64(kv_index.chain_digest(kv_index.root_digest(""), toks[:16])),
          "block 0 chains on the root")
    # docs/design/kv_events.md's example values (vLLM sha256_cbor, 64-bit published hashes).
    one_to_32 = list(range(1, 33))
    check(kv_index.root_digest("").hex() == "8d33f520a3c4cef80d2453aef81b612bfe1cb44c8b2025630ad38662763f13d3",
          "NONE_HASH of seed ''")
    check(kv_index.block_hashes(one_to_32, 16) == [3304056276748800391, 17643853483570299582],
          f"tokens 1..32: {kv_index.block_hashes(one_to_32, 16)}")
    check(kv_index.block_hashes([1, 100, 1000, 70000] * 4, 16) == [3106719121490677778], "wide integer heads")
    check(kv_index.block_hashes(one_to_32, 16, "12345") == [7946494704765058032, 12145793040335043204],
          "seed '12345'")
    check(all(0 <= x < 1 << 64 for x in h), "hashes are 64-bit")


def batch(events, ts=1.0):
    return [ts, events, None]


def stored(hashes, parent, tokens, bs=16):
    return ["BlockStored", hashes, parent, tokens, bs, None, "GPU"]


def test_index_and_scores():
    toks = list(range(7, 7 + 64))
    h = kv_index.block_hashes(toks, 16)   # 4 blocks
    idx = kv_index.PrefixIndex(3, 16)
    _, ev = kv_index.decode_batch(batch([stored(h[:3], None, toks[:48])]))
    idx.apply(0, ev)
    _, ev = kv_index.decode_batch(batch([stored(h[:2], None, toks[:32])]))
    idx.apply(1, ev)
    _, ev = kv_index.decode_batch(batch([stored(h[1:3], h[0], toks[16:48])]))   # not block 0
    idx.apply(2, ev)
    check(idx.stats["rule_checked"] == 7 and idx.stats["rule_mismatch"] == 0,
          f"announced hashes recompute from their tokens ({idx.stats})")
    check(idx.score(h) == [3, 2, 0], f"LongestPrefix scores [3, 2, 0], got {idx.score(h)}")
    _, ev = kv_index.decode_batch(batch([["BlockRemoved", [h[1]], "GPU"]]))
    idx.apply(0, ev)
    check(idx.score(h) == [1, 2, 0], f"after replica 0 evicts block 1: [1, 2, 0], got {idx.score(h)}")
    _, ev = kv_index.decode_batch(batch([["AllBlocksCleared"]]))
    idx.apply(1, ev)
    check(idx.score(h) == [1, 0, 0], f"after replica 1 clears: [1, 0, 0], got {idx.score(h)}")
    check(idx.blocks_held(1) == 0 and idx.blocks_held(2) == 2, "held counts follow the events")
    bad = kv_index.PrefixIndex(1, 16)
    bad.apply(0, kv_index.decode_batch(batch([stored([h[0] ^ 1], None, toks[:16])]))[1])
    check(bad.stats["rule_mismatch"] == 1, "a hash made by another rule is reported")
    # Hashes as bytes (vLLM's native BlockHash) map to the same keys by their last 8 bytes.
    idx2 = kv_index.PrefixIndex(1, 16)
    idx2.apply(0, kv_index.decode_batch(batch([stored([x.to_bytes(32, "big") for x in h], None, toks)]))[1])
    check(idx2.score(h) == [4], "bytes hashes index as their low 64 bits")
    # Map-encoded events.
    _, ev = kv_index.decode_batch({"ts": 1.0, "events": [{"type": "BlockRemoved", "block_hashes": [h[0]]}]})
    idx2.apply(0, ev)
    check(idx2.score(h) == [0], "map-encoded BlockRemoved applies")


def test_policies():
    toks = list(range(1000, 1064))
    h = kv_index.block_hashes(toks, 16)
    idx = kv_index.PrefixIndex(3, 16)
    idx.apply(2, kv_index.decode_batch(batch([stored(h[:2], None, toks[:32])]))[1])
    reps = [route_harness.Replica(i, f"http://x:{i}", "") for i in range(3)]
    rr = route_harness.Router("round-robin", reps, idx)
    picks = [rr.pick(h)[0].idx for _ in range(6)]
    check(picks == [0, 1, 2, 0, 1, 2], f"round-robin rotates, got {picks}")
    for r in reps:
        r.inflight = 0
    reps[0].waiting, reps[1].waiting, reps[2].waiting = 2, 0, 1
    lq = route_harness.Router("least-queue", reps, idx)
    check(lq.pick(h)[0].idx == 1, "least-queue picks the shortest queue")
    reps[1].inflight = 0
    pr = route_harness.Router("precise", reps, idx)
    best, score = pr.pick(h)
    check((best.idx, score) == (2, 2), f"precise picks the replica holding the prefix, got {best.idx}, {score}")
    pr.done(best)
    other = kv_index.block_hashes(list(range(5000, 5064)), 16)
    check(pr.pick(other)[0].idx == 1, "precise with no holder falls back to the shortest queue")
    # precise-load: 3 x prefix + 2 x queue + 2 x (1 - KV usage), each min-max normalised.
    reps[0].waiting, reps[1].waiting, reps[2].waiting = 2, 0, 50
    for r in reps:
        r.inflight = 0
    pl = route_harness.Router("precise-load", reps, idx)
    best = pl.pick(h)[0]
    check(best.idx == 2, "precise-load: the prefix (3) outweighs the longest queue (2)")
    pl.done(best)
    reps[2].kv_usage = 1.0
    check(pl.pick(h)[0].idx == 1, "precise-load leaves a replica with the longest queue and a full cache")


def test_zmq_stream():
    import msgpack
    import zmq
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    router = ctx.socket(zmq.ROUTER)   # a replay server as docs/design/kv_events.md describes
    rport = router.bind_to_random_port("tcp://127.0.0.1")
    reps = [route_harness.Replica(0, "http://unused", f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{rport}")]
    idx = kv_index.PrefixIndex(1, 16)
    stop, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=route_harness.subscribe_loop, args=(reps, idx, stop, ready), daemon=True)
    t.start()
    ready.wait(5)
    time.sleep(0.3)
    toks = list(range(300, 348))
    h = kv_index.block_hashes(toks, 16)
    other = list(range(900, 916))
    ho = kv_index.block_hashes(other, 16)
    sent = {0: batch([stored(h[:2], None, toks[:32])]), 1: batch([stored(h[2:], h[1], toks[32:])]),
            2: batch([stored(ho, None, other)]), 3: batch([["BlockRemoved", [h[2]], None]])}
    payloads = {k: msgpack.packb(v) for k, v in sent.items()}
    replay_requests = []

    def serve_replay():
        if not router.poll(5000):
            return
        ident, empty, start = router.recv_multipart()
        first = int.from_bytes(start, "big")
        replay_requests.append(first)
        for k in sorted(payloads):
            if k >= first:
                router.send_multipart([ident, b"", k.to_bytes(8, "big"), payloads[k]])
        router.send_multipart([ident, b"", (-1).to_bytes(8, "big", signed=True), b""])

    rt = threading.Thread(target=serve_replay, daemon=True)
    rt.start()
    for k in (0, 1, 3):   # seq 2 is lost on the PUB socket
        pub.send_multipart([b"kv@test@m", k.to_bytes(8, "big"), payloads[k]])
    deadline = time.time() + 5
    while reps[0].batches < 4 and time.time() < deadline:
        time.sleep(0.02)
    stop.set()
    t.join(2)
    rt.join(2)
    pub.close(linger=0)
    router.close(linger=0)
    check(reps[0].batches == 4, f"3 batches received over ZeroMQ and 1 replayed, got {reps[0].batches}")
    check(reps[0].seq_gaps == 1 and reps[0].replayed == 1 and replay_requests == [2],
          f"the gap is asked for from seq 2 and filled ({reps[0].seq_gaps}, {reps[0].replayed}, {replay_requests})")
    check(idx.score(h) == [2], f"the stream leaves blocks 0-1, got {idx.score(h)}")
    check(idx.score(ho) == [1], "the replayed batch's block is indexed")
    check(idx.stats["rule_mismatch"] == 0 and idx.stats["rule_checked"] == 4, f"stream hashes check ({idx.stats})")


def main():
    for test in (test_cbor, test_hashes, test_index_and_scores, test_policies, test_zmq_stream):
        test()
    print("route_harness self-test:", "FAILED" if failures else "ok", f"({len(failures)} failure(s))")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
