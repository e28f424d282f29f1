// The content hashes that key media in the engine's caches (image tiles, audio clips, spoken
// frames): SHA-256 over what the caller adds, cut to its first 8 bytes. One helper for every
// kind, so they are computed alike; callers start with a domain tag where kinds could collide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace lfm {

class ContentHash {
 public:
  // `component` names the caller in the error when OpenSSL cannot start a digest ("image", "audio").
  explicit ContentHash(const char* component);
  ~ContentHash();
  ContentHash(const ContentHash&) = delete;
  ContentHash& operator=(const ContentHash&) = delete;

  void add(const void* data, size_t bytes);
  template <typename T>
  void add(std::span<const T> values) {
    add(values.data(), values.size_bytes());
  }
  // The digest's first 8 bytes (host order); the hash takes nothing more afterwards.
  uint64_t finish();

 private:
  void* ctx_;  // EVP_MD_CTX
};

}  // namespace lfm
