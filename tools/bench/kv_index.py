#!/usr/bin/env python3
"""The router's view of the replicas' prefix caches, kept from their KV-cache events.

What llm-d's precise prefix-cache scorer does, in a few dozen lines, for the replicas benchmark
(tools/bench/route_harness.py): the replicas publish vLLM-compatible KV events (BlockStored,
BlockRemoved, AllBlocksCleared in msgpack batches over ZeroMQ PUB: docs/design/kv_events.md);
this module
  - computes a prompt's block hashes from its token ids by the rule the replicas hash by
    (block_hashes: full blocks only, each hash chained on its parent's),
  - decodes event batches (vLLM's array-like msgspec encoding, tagged by the event's class name),
  - keeps an index block hash → replicas holding it, and
  - scores replicas as llm-d's LongestPrefix scorer does: the number of consecutive prompt
    blocks, from the first, that the replica holds (a replica missing block i scores at most i).

The hash rule (docs/design/kv_events.md: vLLM's hash_block_tokens with sha256_cbor, as llm-d's
indexer recomputes it):
    d_root = sha256(cbor(seed))                            seed: a text string ("" by default)
    d_i    = sha256(cbor([d_{i-1}, tokens_i, None]))       the chain carries the full 32-byte digest
    hash_i = low64(d_i)                                     what the events publish
cbor() is canonical CBOR (RFC 8949 §4.2.1: shortest integer heads, definite lengths); low64 takes
a digest's last 8 bytes as a big-endian unsigned integer. Only these types occur, so the encoder
below writes exactly them (no dependency on a CBOR package).
"""
import hashlib
import struct
import threading


# --- canonical CBOR, for the hash payloads --------------------------------------------------------

def _head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for info, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | info]) + struct.pack(fmt, n)
    raise ValueError(f"kv_index: integer {n} does not fit CBOR's 64-bit head")


def cbor(value):
    """Canonical CBOR of None, bool, int, str, bytes and lists of these."""
    if value is None:
        return b"\xf6"
    if value is True or value is False:
        return b"\xf5" if value else b"\xf4"
    if isinstance(value, int):
        return _head(0, value) if value >= 0 else _head(1, -1 - value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _head(3, len(raw)) + raw
    if isinstance(value, (bytes, bytearray)):
        return _head(2, len(value)) + bytes(value)
    if isinstance(value, (list, tuple)):
        return _head(4, len(value)) + b"".join(cbor(v) for v in value)
    raise TypeError(f"kv_index: cannot CBOR-encode {type(value).__name__}")


def low64(digest):
    return int.from_bytes(digest[24:], "big")


def root_digest(seed=""):
    return hashlib.sha256(cbor(seed)).digest()


def chain_digest(parent_digest, tokens):
    """d_i from d_{i-1} (32 bytes) and block i's token ids."""
    return hashlib.sha256(cbor([parent_digest, list(tokens), None])).digest()


def block_hashes(tokens, block_size, seed=""):
    """Published (64-bit) hashes of the full blocks of `tokens` (a trailing partial block has none)."""
    out, d = [], root_digest(seed)
    for i in range(0, len(tokens) - block_size + 1, block_size):
        d = chain_digest(d, tokens[i:i + block_size])
        out.append(low64(d))
    return out


# --- events ---------------------------------------------------------------------------------------

def decode_batch(obj):
    """A decoded msgpack KVEventBatch → (timestamp, [event]); each event a dict with 'type'.

    vLLM encodes the batch as [ts, [event...], data_parallel_rank?] and each event as
    [tag, field...] in declaration order (msgspec array_like, tag=True; trailing defaults may be
    omitted): BlockStored [hashes, parent, token_ids, block_size, lora_id?, medium?, ...],
    BlockRemoved [hashes, medium?], AllBlocksCleared []. Map-encoded events are accepted too."""
    if isinstance(obj, dict):
        ts, events = obj.get("ts"), obj.get("events", [])
    elif isinstance(obj, (list, tuple)) and len(obj) >= 2:
        ts, events = obj[0], obj[1]
    else:
        raise ValueError(f"kv_index: not an event batch: {obj!r:.200}")
    out = []
    for e in events:
        if isinstance(e, dict):
            kind = e.get("type")
            fields = e
        else:
            kind, rest = e[0], list(e[1:])
            names = {"BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                                     "medium"],
                     "BlockRemoved": ["block_hashes", "medium"],
                     "AllBlocksCleared": []}.get(kind if isinstance(kind, str) else kind.decode(), None)
            if names is None:
                raise ValueError(f"kv_index: unknown event tag {kind!r}")
            fields = dict(zip(names, rest))
        if isinstance(kind, bytes):
            kind = kind.decode()
        fields = dict(fields)
        fields["type"] = kind
        out.append(fields)
    return ts, out


def hash_key(h):
    """An announced block hash as the int the hash rule computes (bytes: big-endian, last 8)."""
    if isinstance(h, int):
        return h & 0xFFFFFFFFFFFFFFFF
    if isinstance(h, (bytes, bytearray)):
        return int.from_bytes(bytes(h)[-8:], "big")
    raise ValueError(f"kv_index: block hash of type {type(h).__name__}")


class PrefixIndex:
    """block hash → set of replicas, from every replica's events; thread-safe."""

    def __init__(self, n_replicas, block_size, seed=""):
        self.n = n_replicas
        self.block_size = block_size
        self.seed = seed
        self._lock = threading.Lock()
        self._where = {}                                # hash → set(replica)
        self._held = [set() for _ in range(n_replicas)]  # replica → its hashes
        self.stats = {"stored": 0, "removed": 0, "cleared": 0, "rule_checked": 0, "rule_mismatch": 0,
                      "rule_unchecked": 0, "unknown_removed": 0}
        self._digests = {}  # published hash → its 32-byte digest, for blocks whose rule was checked

    def apply(self, replica, events, check_rule=True):
        """Applies one replica's decoded events (decode_batch's list)."""
        with self._lock:
            for e in events:
                kind = e["type"]
                if kind == "BlockStored":
                    hashes = [hash_key(h) for h in e["block_hashes"]]
                    if check_rule and e.get("token_ids") is not None and e.get("block_size"):
                        self._check_rule(e, hashes)
                    for h in hashes:
                        self._where.setdefault(h, set()).add(replica)
                        self._held[replica].add(h)
                    self.stats["stored"] += len(hashes)
                elif kind == "BlockRemoved":
                    for h in (hash_key(x) for x in e["block_hashes"]):
                        if h not in self._held[replica]:
                            self.stats["unknown_removed"] += 1
                            continue
                        self._held[replica].discard(h)
                        s = self._where.get(h)
                        if s is not None:
                            s.discard(replica)
                            if not s:
                                del self._where[h]
                        self.stats["removed"] += 1
                elif kind == "AllBlocksCleared":
                    self._clear(replica)
                    self.stats["cleared"] += 1
                else:
                    raise ValueError(f"kv_index: unknown event {kind!r}")

    def _check_rule(self, e, hashes):
        """Recomputes a BlockStored's hashes from its parent's digest and its tokens by our rule: a
        mismatch means the router and the replicas disagree on the rule (every score would be 0).
        The events carry 64-bit hashes but the chain runs on 32-byte digests, so a block is
        checkable when its parent is the root or a block checked before (lfm announces parents
        first); others count as unchecked."""
        bs = int(e["block_size"])
        toks = list(e["token_ids"])
        parent = e.get("parent_block_hash")
        d = root_digest(self.seed) if parent is None else self._digests.get(hash_key(parent))
        for i, h in enumerate(hashes):
            chunk = toks[i * bs:(i + 1) * bs]
            if d is None or len(chunk) != bs:
                self.stats["rule_unchecked"] += len(hashes) - i
                return
            d = chain_digest(d, chunk)
            self.stats["rule_checked"] += 1
            if low64(d) != h:
                self.stats["rule_mismatch"] += 1
                return
            self._digests[h] = d

    def _clear(self, replica):
        for h in self._held[replica]:
            s = self._where.get(h)
            if s is not None:
                s.discard(replica)
                if not s:
                    del self._where[h]
        self._held[replica] = set()

    def clear_all(self):
        with self._lock:
            self._where.clear()
            self._held = [set() for _ in range(self.n)]

    def blocks_held(self, replica):
        with self._lock:
            return len(self._held[replica])

    def score(self, hashes):
        """LongestPrefix: per replica, how many of the prompt's blocks from the first it holds."""
        scores = [0] * self.n
        with self._lock:
            active = None
            for i, h in enumerate(hashes):
                holders = self._where.get(h, set())
                active = set(holders) if active is None else active & holders
                if not active:
                    break
                for r in active:
                    scores[r] = i + 1
        return scores
