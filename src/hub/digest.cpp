#include "hub/digest.h"

#include "core/file_io.h"

#include <openssl/evp.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace lfm::hub {

struct Digest::Impl {
  const EVP_MD* md = nullptr;
  EVP_MD_CTX* ctx = nullptr;
};

Digest::Digest(Algo algo) : impl_(std::make_unique<Impl>()) {
  impl_->md = algo == Algo::kSha256 ? EVP_sha256() : EVP_sha1();
  impl_->ctx = EVP_MD_CTX_new();
  LFM_CHECK(impl_->ctx, "digest: out of memory");
  reset();
}

Digest::~Digest() { EVP_MD_CTX_free(impl_->ctx); }

void Digest::reset() { LFM_CHECK(EVP_DigestInit_ex(impl_->ctx, impl_->md, nullptr) == 1, "digest: init failed"); }

void Digest::update(const void* data, size_t n) {
  LFM_CHECK(EVP_DigestUpdate(impl_->ctx, data, n) == 1, "digest: update failed");
}

std::string Digest::hex() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  LFM_CHECK(EVP_DigestFinal_ex(impl_->ctx, out, &n) == 1, "digest: final failed");
  reset();
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < n; ++i) {
    s += kHex[out[i] >> 4];
    s += kHex[out[i] & 15];
  }
  return s;
}

namespace {

void hash_stream(Digest& d, const std::filesystem::path& path, int64_t size) {
  LFM_CHECK(is_regular_path(path.string()), "digest: '", path.string(), "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  LFM_CHECK(in, "digest: cannot open '", path.string(), "'");
  std::vector<char> buf(1 << 20);
  int64_t left = size;
  while (size < 0 || left > 0) {
    const auto want = size < 0 ? static_cast<std::streamsize>(buf.size())
                               : static_cast<std::streamsize>(std::min<int64_t>(left, static_cast<int64_t>(buf.size())));
    in.read(buf.data(), want);
    const std::streamsize got = in.gcount();
    if (got > 0) d.update(buf.data(), static_cast<size_t>(got));
    left -= got;
    if (got < want) break;
  }
  LFM_CHECK(size < 0 || left == 0, "digest: '", path.string(), "' is shorter than ", size, " bytes");
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  Digest d(Digest::Algo::kSha256);
  d.update(bytes.data(), bytes.size());
  return d.hex();
}

std::string sha256_file(const std::filesystem::path& path, int64_t size) {
  Digest d(Digest::Algo::kSha256);
  hash_stream(d, path, size);
  return d.hex();
}

std::string git_blob_sha1(const std::string& bytes) {
  Digest d(Digest::Algo::kSha1);
  const std::string header = "blob " + std::to_string(bytes.size()) + std::string(1, '\0');
  d.update(header.data(), header.size());
  d.update(bytes.data(), bytes.size());
  return d.hex();
}

std::string git_blob_sha1_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  LFM_CHECK(!ec, "digest: cannot read '", path.string(), "': ", ec.message());
  Digest d(Digest::Algo::kSha1);
  const std::string header = "blob " + std::to_string(size) + std::string(1, '\0');
  d.update(header.data(), header.size());
  hash_stream(d, path, static_cast<int64_t>(size));
  return d.hex();
}

EtagKind etag_kind(const std::string& etag) {
  const bool hex = !etag.empty() && std::all_of(etag.begin(), etag.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (hex && etag.size() == 64) return EtagKind::kSha256;
  if (hex && etag.size() == 40) return EtagKind::kGitSha1;
  return EtagKind::kOpaque;
}

}  // namespace lfm::hub
