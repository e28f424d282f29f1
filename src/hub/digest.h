// SHA-256 and SHA-1 (OpenSSL's libcrypto) for checking downloads against what the Hub reports: an
// LFS file's ETag is the sha256 of its bytes, a regular git file's is its git blob id,
// sha1("blob <size>\0" + bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace lfm::hub {

class Digest {
 public:
  enum class Algo { kSha256, kSha1 };
  explicit Digest(Algo algo);
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  void reset();
  void update(const void* data, size_t n);
  std::string hex();  // lower-case hex; the digest is finished and reset afterwards

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256_hex(const std::string& bytes);
// Hashes `size` bytes of a file (all of it when size is -1); throws lfm::Error when it cannot be read.
std::string sha256_file(const std::filesystem::path& path, int64_t size = -1);
std::string git_blob_sha1_file(const std::filesystem::path& path);
std::string git_blob_sha1(const std::string& bytes);

// What an ETag promises about the content: a sha256 (64 hex digits), a git blob sha1 (40), or
// nothing we can check (a mirror with its own ETags): then only the size is checked.
enum class EtagKind { kSha256, kGitSha1, kOpaque };
EtagKind etag_kind(const std::string& etag);

}  // namespace lfm::hub
