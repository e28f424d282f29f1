#include "engine/content_hash.h"

#include <openssl/evp.h>

#include <cstring>

#include "core/error.h"

namespace lfm {

ContentHash::ContentHash(const char* component) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    fail(component, ": cannot start SHA-256");
  }
  ctx_ = ctx;
}

ContentHash::~ContentHash() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void ContentHash::add(const void* data, size_t bytes) {
  if (bytes > 0) EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, bytes);
}

uint64_t ContentHash::finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &n);
  uint64_t h = 0;
  std::memcpy(&h, digest, sizeof(h));
  return h;
}

}  // namespace lfm
