// A fake Hugging Face Hub on loopback for the hub tests: the revision API, resolve URLs (regular
// files answered directly with their git blob sha1 as ETag, LFS files redirected to a CDN-like
// /cdn/<sha256> path with X-Linked-Etag / X-Linked-Size), X-Repo-Commit, Range requests, gated
// repositories (401 without the right Bearer token, 403 with a wrong one), 404s with the Hub's
// X-Error-Code, and faults: a transfer cut after N bytes, corrupted bytes, and per-file quirks
// (opaque or upper-case ETags, no digests or sizes, bodies that end early or drip). Never the internet.
#pragma once

#include <httplib.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lfm::test {

// A loopback port nothing listens on (bound, then closed): an unreachable Hub.
int closed_port();


class FakeHub {
 public:
  struct Repo {
    std::string commit;                         // 40 hex digits
    std::map<std::string, std::string> files;   // path → bytes
    std::string gated_token;                    // non-empty: resolve needs "Authorization: Bearer <it>"
  };
  struct Request {
    std::string method, path, range, auth;
    int status = 0;
  };

  FakeHub();   // listening on 127.0.0.1, an ephemeral port
  ~FakeHub();  // stops the server
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void add_repo(const std::string& id, Repo repo);
  // Every file of a folder (recursively), plus any `extra` files.
  void add_folder(const std::string& id, const std::filesystem::path& dir, const std::string& commit,
                  const std::map<std::string, std::string>& extra = {});

  // A renamed repository: requests for `old` answer 307 with a relative Location under `current`,
  // as the Hub does.
  void add_alias(const std::string& old_id, const std::string& current_id);

  // Files at least this large, and every .safetensors/.gguf, are LFS files (redirected to /cdn/).
  static constexpr size_t kLfsThreshold = 10 * 1024;
  static bool is_lfs(const std::string& path, const std::string& bytes);

  // The next `times` transfers of this file (by its path in the repo) stop after `after` bytes.
  void cut(const std::string& path, size_t after, int times = 1);
  // Serve this file with one byte flipped (same length) until turned off.
  void corrupt(const std::string& path, bool on);

  // How a file is served, for the integrity and rate tests (the defaults: as the Hub does).
  struct Quirks {
    std::string etag;           // sent verbatim as ETag (X-Linked-Etag for LFS files) instead of the digest
    bool api_digest = true;     // the revision API lists the file's lfs.sha256 / blobId
    bool size = true;           // sizes in the API and headers; false: a chunked body, no X-Linked-Size
    size_t end_after = std::string::npos;  // a chunked body that ends cleanly after this many bytes
    int drip_ms = 0;            // > 0: the body comes drip_bytes at a time, drip_ms apart
    size_t drip_bytes = 1;
  };
  void set_quirks(const std::string& path, Quirks q);
  // Every revision API answer carries this many extra bytes (a field of spaces).
  void pad_api_answers(size_t bytes);

  std::vector<Request> requests() const;
  void clear_requests();
  // Requests whose method matches and whose path contains `needle`.
  int count(const std::string& method, const std::string& needle) const;

 private:
  // Records a request when its handler returns (with the status the handler set; -1: httplib's
  // default, 200 or 206).
  class Logged {
   public:
    Logged(FakeHub* hub, const httplib::Request& req, const httplib::Response& res) : hub_(hub), req_(req), res_(res) {}
    ~Logged();

   private:
    FakeHub* hub_;
    const httplib::Request& req_;
    const httplib::Response& res_;
  };
  struct Blob {
    std::string repo, path, bytes;
  };
  void serve_bytes(const httplib::Request& req, httplib::Response& res, const std::string& path, const std::string& bytes);
  bool check_access(const httplib::Request& req, httplib::Response& res, const Repo& repo);
  // Answers a request for a renamed repository with a redirect; false when `id` is no alias.
  bool redirect_alias(const httplib::Request& req, httplib::Response& res, const std::string& id);

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, Repo> repos_;
  std::map<std::string, std::string> aliases_;  // old id → current id
  std::map<std::string, Blob> cdn_;                          // sha256 → file
  std::map<std::string, std::pair<size_t, int>> cuts_;       // path → (after, times left)
  std::map<std::string, bool> corrupt_;
  std::map<std::string, Quirks> quirks_;
  size_t api_padding_ = 0;
  mutable std::mutex log_mu_;
  std::vector<Request> log_;
};

}  // namespace lfm::test
