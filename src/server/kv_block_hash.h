// The block hash of vLLM's prefix cache with --prefix-caching-hash-algo sha256_cbor, the one
// llm-d's KV-cache indexer recomputes from a prompt's tokens (docs/design/kv_events.md):
//   NONE_HASH = SHA-256(cbor(seed))                      seed: a text string (PYTHONHASHSEED)
//   d_i       = SHA-256(cbor([d_{i-1}, tokens_i, null]))  d_{-1} = NONE_HASH, 32-byte chain
//   published = the last 8 bytes of d_i, big-endian       (vLLM's int block hashes)
// cbor is canonical CBOR (RFC 8949 §4.2.1): shortest heads, definite lengths.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace lfm::server {

using KvDigest = std::array<uint8_t, 32>;  // a block's full SHA-256 (the chain carries all of it)

// The parent digest of a sequence's first block.
KvDigest kv_none_hash(std::string_view seed);
// The digest of a full block of `tokens` (non-negative ids) after the block whose digest is `parent`.
KvDigest kv_block_digest(const KvDigest& parent, std::span<const int32_t> tokens);
// The 64-bit hash the events carry: the digest's last 8 bytes, big-endian.
uint64_t kv_published_hash(const KvDigest& d);

}  // namespace lfm::server
