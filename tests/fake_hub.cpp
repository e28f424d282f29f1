#include "fake_hub.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "hub/digest.h"

namespace lfm::test {

int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

namespace {

namespace fs = std::filesystem;

void error(httplib::Response& res, int status, const std::string& code, const std::string& message) {
  res.status = status;
  res.set_header("X-Error-Code", code);
  res.set_header("X-Error-Message", message);
  res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool FakeHub::is_lfs(const std::string& path, const std::string& bytes) {
  return bytes.size() >= kLfsThreshold || ends_with(path, ".safetensors") || ends_with(path, ".gguf");
}

FakeHub::FakeHub() {
  // Requests are logged by the handlers themselves, before the answer goes out: a logger that runs
  // after the response is written races with the test reading the log.
  server_.Get(R"(/api/models/([^/]+)/([^/]+)/revision/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> g(mu_);
    Logged logged(this, req, res);
    const std::string id = std::string(req.matches[1]) + "/" + std::string(req.matches[2]);
    const std::string rev = req.matches[3];
    if (redirect_alias(req, res, id)) return;
    const auto it = repos_.find(id);
    if (it == repos_.end()) return error(res, 404, "RepoNotFound", "Repository not found");
    const Repo& r = it->second;
    if (rev != "main" && rev != r.commit) return error(res, 404, "RevisionNotFound", "Invalid rev id: " + rev);
    nlohmann::json siblings = nlohmann::json::array();
    for (const auto& [path, bytes] : r.files) {
      const Quirks q = quirks_.count(path) ? quirks_.at(path) : Quirks{};
      nlohmann::json s = {{"rfilename", path}};
      if (q.size) s["size"] = bytes.size();
      if (q.api_digest) s["blobId"] = hub::git_blob_sha1(bytes);
      if (is_lfs(path, bytes)) {
        s["lfs"] = {{"pointerSize", 134}};
        if (q.api_digest) s["lfs"]["sha256"] = hub::sha256_hex(bytes);
        if (q.size) s["lfs"]["size"] = bytes.size();
      }
      siblings.push_back(s);
    }
    nlohmann::json answer = {{"id", id}, {"sha", r.commit}, {"siblings", siblings}};
    if (api_padding_ > 0) answer["padding"] = std::string(api_padding_, ' ');
    res.set_content(answer.dump(), "application/json");
  });

  server_.Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::unique_lock<std::mutex> g(mu_);
    Logged logged(this, req, res);
    const std::string id = std::string(req.matches[1]) + "/" + std::string(req.matches[2]);
    const std::string rev = req.matches[3], path = req.matches[4];
    if (redirect_alias(req, res, id)) return;
    const auto it = repos_.find(id);
    if (it == repos_.end()) return error(res, 404, "RepoNotFound", "Repository not found");
    const Repo& r = it->second;
    if (!check_access(req, res, r)) return;
    if (rev != "main" && rev != r.commit) return error(res, 404, "RevisionNotFound", "Invalid rev id: " + rev);
    const auto f = r.files.find(path);
    if (f == r.files.end()) return error(res, 404, "EntryNotFound", "Entry not found");
    res.set_header("X-Repo-Commit", r.commit);
    const Quirks q = quirks_.count(path) ? quirks_.at(path) : Quirks{};
    if (is_lfs(path, f->second)) {
      const std::string sha = hub::sha256_hex(f->second);
      res.set_header("X-Linked-Etag", "\"" + (q.etag.empty() ? sha : q.etag) + "\"");
      if (q.size) res.set_header("X-Linked-Size", std::to_string(f->second.size()));
      res.set_header("ETag", "\"" + hub::git_blob_sha1("version https://git-lfs.github.com/spec/v1\noid sha256:" + sha) + "\"");
      res.set_redirect(endpoint() + "/cdn/" + sha + "?repo=" + id, 302);
      return;
    }
    res.set_header("ETag", "\"" + (q.etag.empty() ? hub::git_blob_sha1(f->second) : q.etag) + "\"");
    const std::string bytes = f->second;
    g.unlock();
    serve_bytes(req, res, path, bytes);
  });

  server_.Get(R"(/cdn/([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
    std::unique_lock<std::mutex> g(mu_);
    Logged logged(this, req, res);
    const auto it = cdn_.find(req.matches[1]);
    if (it == cdn_.end()) {
      res.status = 404;
      return;
    }
    // A CDN has no idea of tokens: anything sent along a cross-host redirect would be a leak; the
    // Hub's own checks happened on /resolve.
    const Blob b = it->second;
    g.unlock();
    serve_bytes(req, res, b.path, b.bytes);
  });

  port_ = server_.bind_to_any_port("127.0.0.1");
  if (port_ <= 0) throw std::runtime_error("fake hub: cannot bind a loopback port");
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  // The socket listens from bind_to_any_port on: early connections wait in its backlog.
}

FakeHub::~FakeHub() {
  server_.stop();
  if (thread_.joinable()) thread_.join();
}

bool FakeHub::check_access(const httplib::Request& req, httplib::Response& res, const Repo& repo) {
  if (repo.gated_token.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.empty()) {
    error(res, 401, "GatedRepo", "Access to this model is restricted. You must be authenticated to access it.");
    return false;
  }
  if (auth != "Bearer " + repo.gated_token) {
    error(res, 403, "GatedRepo", "Access to this model is restricted and you are not in the authorized list.");
    return false;
  }
  return true;
}

// The file with Range support (httplib slices a content provider by the request's Range and
// answers 206), applying the faults set for it.
void FakeHub::serve_bytes(const httplib::Request& req, httplib::Response& res, const std::string& path,
                          const std::string& bytes) {
  std::string data = bytes;
  size_t cut_at = std::string::npos;
  Quirks q;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (quirks_.count(path)) q = quirks_.at(path);
    if (corrupt_[path] && !data.empty()) data[data.size() / 2] = static_cast<char>(data[data.size() / 2] ^ 0x5a);
    auto c = cuts_.find(path);
    if (req.method == "GET" && c != cuts_.end() && c->second.second > 0) {
      cut_at = c->second.first;
      if (--c->second.second == 0) cuts_.erase(c);
    }
  }
  auto shared = std::make_shared<std::string>(std::move(data));
  if (!q.size || q.end_after != std::string::npos || q.drip_ms > 0) {
    // No Content-Length (unless sized), no Range: the body from its start, in drips if asked,
    // ending cleanly after end_after bytes.
    const size_t end = std::min(shared->size(), q.end_after);
    const size_t step = q.drip_ms > 0 ? std::max<size_t>(1, q.drip_bytes) : 64 * 1024;
    auto provide = [shared, end, step, q](size_t offset, httplib::DataSink& sink) {
      if (offset >= end) {
        sink.done();
        return true;
      }
      if (q.drip_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(q.drip_ms));
      return sink.write(shared->data() + offset, std::min(step, end - offset));
    };
    if (q.size) {
      res.set_content_provider(shared->size(), "application/octet-stream",
                               [provide](size_t offset, size_t, httplib::DataSink& sink) { return provide(offset, sink); });
    } else {
      res.set_chunked_content_provider("application/octet-stream", provide);
    }
    return;
  }
  res.set_content_provider(shared->size(), "application/octet-stream",
                           [shared, cut_at](size_t offset, size_t length, httplib::DataSink& sink) {
                             size_t end = offset + length;
                             const bool cut = cut_at != std::string::npos && cut_at < end;
                             if (cut) end = std::max(offset, cut_at);
                             for (size_t at = offset; at < end;) {
                               const size_t n = std::min<size_t>(64 * 1024, end - at);
                               if (!sink.write(shared->data() + at, n)) return false;
                               at += n;
                             }
                             return !cut;  // false drops the connection mid-body
                           });
}

bool FakeHub::redirect_alias(const httplib::Request& req, httplib::Response& res, const std::string& id) {
  const auto a = aliases_.find(id);
  if (a == aliases_.end()) return false;
  std::string target = req.target;  // path and query as sent
  target.replace(target.find(id), id.size(), a->second);
  res.set_redirect(target, 307);
  return true;
}

void FakeHub::set_quirks(const std::string& path, Quirks q) {
  std::lock_guard<std::mutex> g(mu_);
  quirks_[path] = std::move(q);
}

void FakeHub::pad_api_answers(size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  api_padding_ = bytes;
}

void FakeHub::add_alias(const std::string& old_id, const std::string& current_id) {
  std::lock_guard<std::mutex> g(mu_);
  aliases_[old_id] = current_id;
}

void FakeHub::add_repo(const std::string& id, Repo repo) {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [path, bytes] : repo.files)
    if (is_lfs(path, bytes)) cdn_[hub::sha256_hex(bytes)] = {id, path, bytes};
  repos_[id] = std::move(repo);
}

void FakeHub::add_folder(const std::string& id, const fs::path& dir, const std::string& commit,
                         const std::map<std::string, std::string>& extra) {
  Repo r;
  r.commit = commit;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    r.files[e.path().lexically_relative(dir).generic_string()] = ss.str();
  }
  for (const auto& [p, b] : extra) r.files[p] = b;
  add_repo(id, std::move(r));
}

void FakeHub::cut(const std::string& path, size_t after, int times) {
  std::lock_guard<std::mutex> g(mu_);
  cuts_[path] = {after, times};
}

void FakeHub::corrupt(const std::string& path, bool on) {
  std::lock_guard<std::mutex> g(mu_);
  corrupt_[path] = on;
}

FakeHub::Logged::~Logged() {
  std::lock_guard<std::mutex> g(hub_->log_mu_);
  hub_->log_.push_back({req_.method, req_.path, req_.get_header_value("Range"), req_.get_header_value("Authorization"),
                        res_.status});
}

std::vector<FakeHub::Request> FakeHub::requests() const {
  std::lock_guard<std::mutex> g(log_mu_);
  return log_;
}

void FakeHub::clear_requests() {
  std::lock_guard<std::mutex> g(log_mu_);
  log_.clear();
}

int FakeHub::count(const std::string& method, const std::string& needle) const {
  std::lock_guard<std::mutex> g(log_mu_);
  int n = 0;
  for (const auto& r : log_) n += r.method == method && r.path.find(needle) != std::string::npos;
  return n;
}

}  // namespace lfm::test
