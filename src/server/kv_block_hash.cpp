#include "server/kv_block_hash.h"

#include <openssl/evp.h>

#include <vector>

#include "core/error.h"

namespace lfm::server {
namespace {

// A canonical CBOR head: major type and argument in the fewest bytes (RFC 8949 §3, §4.2.1).
void cbor_head(std::vector<uint8_t>& out, uint8_t major, uint64_t n) {
  const uint8_t m = static_cast<uint8_t>(major << 5);
  if (n < 24) {
    out.push_back(static_cast<uint8_t>(m | n));
    return;
  }
  int bytes = n <= 0xff ? 1 : n <= 0xffff ? 2 : n <= 0xffffffffull ? 4 : 8;
  out.push_back(static_cast<uint8_t>(m | (bytes == 1 ? 24 : bytes == 2 ? 25 : bytes == 4 ? 26 : 27)));
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
}

KvDigest sha256(const std::vector<uint8_t>& bytes) {
  KvDigest d{};
  unsigned int len = 0;
  LFM_CHECK(EVP_Digest(bytes.data(), bytes.size(), d.data(), &len, EVP_sha256(), nullptr) == 1 && len == d.size(),
            "kv events: SHA-256 of ", bytes.size(), " bytes failed (OpenSSL)");
  return d;
}

}  // namespace

KvDigest kv_none_hash(std::string_view seed) {
  std::vector<uint8_t> cbor;
  cbor_head(cbor, 3, seed.size());  // a text string
  cbor.insert(cbor.end(), seed.begin(), seed.end());
  return sha256(cbor);
}

KvDigest kv_block_digest(const KvDigest& parent, std::span<const int32_t> tokens) {
  std::vector<uint8_t> cbor;
  cbor.reserve(40 + tokens.size() * 5);
  cbor_head(cbor, 4, 3);              // [parent, tokens, extra_keys]
  cbor_head(cbor, 2, parent.size());  // the parent's digest: a byte string
  cbor.insert(cbor.end(), parent.begin(), parent.end());
  cbor_head(cbor, 4, tokens.size());  // the token ids: an array of unsigned integers
  for (int32_t t : tokens) {
    LFM_CHECK(t >= 0, "kv events: block token id ", t, " is negative (media rows are not hashed)");
    cbor_head(cbor, 0, static_cast<uint64_t>(t));
  }
  cbor.push_back(0xf6);  // extra_keys: null
  return sha256(cbor);
}

uint64_t kv_published_hash(const KvDigest& d) {
  uint64_t h = 0;
  for (size_t i = d.size() - 8; i < d.size(); ++i) h = (h << 8) | d[i];
  return h;
}

}  // namespace lfm::server
