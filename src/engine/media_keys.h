// How the state cache keys prompt positions that are not text tokens (image tiles, audio clips,
// audio frames): negative, so never a token id, and derived from the medium's content so the
// prefix cache reuses a repeated medium and never confuses two.
#pragma once

#include <cstdint>
#include <span>

namespace lfm {

// splitmix64's finaliser: a bijection, so distinct inputs stay distinct.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The cache key of token i of a medium with this content hash.
inline int32_t media_token_key(uint64_t hash, int64_t i) {
  return -1 - static_cast<int32_t>(mix64(hash + static_cast<uint64_t>(i)) >> 33);
}

// A content hash of an audio frame's codes (a domain apart from the SHA-256 media hashes).
inline uint64_t frame_codes_hash(std::span<const int32_t> codes) {
  uint64_t h = 0x5bd1e9955bd1e995ull;
  for (int32_t c : codes) h = mix64(h ^ static_cast<uint32_t>(c));
  return h;
}

}  // namespace lfm
