#!/usr/bin/env python3
"""Known answers for lfm's KV-cache event block hashes (tests/kv_events_test.cpp).

Computed independently of lfm's C++: Python's hashlib and the small canonical-CBOR encoder below
(RFC 8949 §4.2.1: shortest heads, definite lengths), following vLLM's sha256_cbor rule:
    NONE_HASH = sha256(cbor(seed)); d_i = sha256(cbor([d_{i-1}, tokens_i, None]));
    published = int.from_bytes(d_i[-8:], "big")
Run: python3 tests/data/kv_events/make_hash_vectors.py > tests/data/kv_events/hash_vectors.json
"""
import hashlib
import json


def head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for ai, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes([major << 5 | ai]) + n.to_bytes(width, "big")
    raise ValueError(n)


def cbor(x):
    if x is None:
        return b"\xf6"
    if isinstance(x, bytes):
        return head(2, len(x)) + x
    if isinstance(x, str):
        b = x.encode("utf-8")
        return head(3, len(b)) + b
    if isinstance(x, int) and x >= 0:
        return head(0, x)
    if isinstance(x, (list, tuple)):
        return head(4, len(x)) + b"".join(cbor(v) for v in x)
    raise TypeError(type(x))


def none_hash(seed):
    return hashlib.sha256(cbor(seed)).digest()


def chain(tokens, block_size, seed):
    d = none_hash(seed)
    out = []
    for i in range(0, len(tokens) - block_size + 1, block_size):
        d = hashlib.sha256(cbor([d, tuple(tokens[i:i + block_size]), None])).digest()
        out.append(int.from_bytes(d[-8:], "big"))
    return out


CASES = [
    ("", 16, list(range(1, 33))),
    ("12345", 16, list(range(1, 33))),
    ("", 16, [1, 100, 1000, 70000] * 4 + [0, 23, 24, 255, 256, 65535, 65536, 2**31 - 1] * 2),
    ("0", 4, [7, 7, 7, 7, 8, 8, 8, 8, 9]),  # the last partial block is not hashed
    ("seed with spaces, and more than 23 bytes", 1, [3, 2, 1]),
]

if __name__ == "__main__":
    out = {
        "none_hash": {seed: none_hash(seed).hex() for seed in ["", "12345", "0"]},
        "cases": [{"seed": s, "block_size": b, "tokens": t, "hashes": [str(h) for h in chain(t, b, s)]}
                  for s, b, t in CASES],
    }
    print(json.dumps(out))
