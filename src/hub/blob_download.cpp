#include "hub/blob_download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "hub/digest.h"
#include "hub/hub_api.h"
#include "hub/hub_error.h"
#include "hub/progress.h"

namespace lfm::hub {
namespace {

namespace fs = std::filesystem;

// An exclusive flock on the blob's lock file, the same lock huggingface_hub's FileLock takes, so
// two processes never write one .incomplete file at once.
class BlobLock {
 public:
  BlobLock(const fs::path& path, bool verbose) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    // O_NOFOLLOW: a symlink planted at a cache name is never followed (issue 55).
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) hub_fail(ErrorKind::kDisk, "cannot create the lock file '", path.string(), "': ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (verbose) std::fprintf(stderr, "waiting for another process downloading into the cache (%s)\n", path.c_str());
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~BlobLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

uint64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

[[noreturn]] void disk_error(const fs::path& path, int err, const char* doing) {
  if (err == ENOSPC || err == EDQUOT)
    hub_fail(ErrorKind::kDisk, "disk full while ", doing, " '", path.string(),
             "': free some space (`lfm models rm` deletes cached models) or point HF_HUB_CACHE at a larger disk");
  hub_fail(ErrorKind::kDisk, "cannot write '", path.string(), "' (", doing, "): ", std::strerror(err));
}

// Where Content-Range says a 206 starts ("bytes 100-199/200" → 100).
std::optional<uint64_t> range_start(const std::string& content_range) {
  unsigned long long start = 0;
  if (std::sscanf(content_range.c_str(), "bytes %llu-", &start) != 1) return std::nullopt;
  return start;
}

// Whether a digest will check the bytes: only then may a transfer continue a partial file (the
// server could send the rest of another file; nothing else would notice).
bool checkable(const BlobTarget& t) { return !t.sha256.empty() || !t.git_sha1.empty(); }

// The whole transfer's deadline (Settings::transfer_deadline_s).
long deadline_s(const Settings& s, const BlobTarget& t) {
  if (s.transfer_deadline_s > 0) return s.transfer_deadline_s;
  return t.size > 0 ? 300 + static_cast<long>(t.size / (256 * 1024)) : 3600;
}

// One try: appends to the .incomplete file from where it ends (or starts it over when nothing
// will check the joined bytes). Returns the bytes it holds.
uint64_t transfer(const HttpClient& http, const Settings& s, const RepoCache& cache, const BlobTarget& t,
                  Digest* sha256) {
  const fs::path part = cache.incomplete(t.etag);
  // O_NOFOLLOW and a regular-file check: a symlink or FIFO planted at the name is refused, never
  // written through (issue 55); what is read back is read from this descriptor.
  Fd fd(::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
  if (fd.get() < 0) disk_error(part, errno, "creating");
  struct stat part_st {};
  if (::fstat(fd.get(), &part_st) != 0) disk_error(part, errno, "examining");
  if (!S_ISREG(part_st.st_mode))
    hub_fail(ErrorKind::kDisk, "'", part.string(), "' is not a regular file; remove it and try again");
  uint64_t have = static_cast<uint64_t>(part_st.st_size);
  if ((t.size > 0 && have > t.size) || !checkable(t)) {  // not a prefix of this file, or unverifiable: start over
    if (::ftruncate(fd.get(), 0) != 0) disk_error(part, errno, "truncating");
    have = 0;
  }
  if (::lseek(fd.get(), static_cast<off_t>(have), SEEK_SET) < 0) disk_error(part, errno, "seeking in");
  // The hash covers the bytes already there too: read them back once.
  if (sha256) {
    sha256->reset();
    std::vector<char> buf(1 << 20);
    for (uint64_t at = 0; at < have;) {
      const ssize_t n = ::pread(fd.get(), buf.data(), static_cast<size_t>(std::min<uint64_t>(have - at, buf.size())),
                                static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) hub_fail(ErrorKind::kDisk, "cannot read back '", part.string(), "'");
      sha256->update(buf.data(), static_cast<size_t>(n));
      at += static_cast<uint64_t>(n);
    }
  }
  if (t.size > 0 && have == t.size) return have;  // a previous run got every byte but not the rename

  Progress bar(s.progress, t.path, t.size, have);
  StreamSink sink;
  sink.begin = [&](const HttpResponse& head) {
    if (head.status == 206) {
      const auto start = range_start(head.header("content-range"));
      if (!start || *start != have)
        hub_fail(ErrorKind::kInterrupted, "the server resumed '", t.path, "' at the wrong offset (",
                 head.header("content-range"), ", expected ", have, ")");
      return;
    }
    if (have > 0) {  // a 200 to a Range request: the whole file comes again
      if (::ftruncate(fd.get(), 0) != 0 || ::lseek(fd.get(), 0, SEEK_SET) < 0) disk_error(part, errno, "truncating");
      have = 0;
      if (sha256) sha256->reset();
      bar.restart();
    }
  };
  sink.write = [&](const char* data, size_t n) {
    write_all(fd.get(), data, n, part);
    if (sha256) sha256->update(data, n);
    have += n;
    bar.add(n);
  };
  const HttpResponse r = http.stream(t.url, have, sink, deadline_s(s, t));
  if (r.status == 416) {  // our partial file does not fit the server's: drop it and retry
    if (::ftruncate(fd.get(), 0) != 0) disk_error(part, errno, "truncating");
    hub_fail(ErrorKind::kInterrupted, "the server refused to resume '", t.path, "' (HTTP 416); starting over");
  }
  if (r.status < 200 || r.status >= 300) throw_http_error(r, s, cache.repo(), t.commit, t.path);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) disk_error(part, errno, "flushing");
  if (::close(fd.release()) != 0) disk_error(part, errno, "closing");
  if (t.size > 0 && have < t.size)
    hub_fail(ErrorKind::kInterrupted, "the transfer of '", t.path, "' ended after ", have, " of ", t.size, " bytes");
  bar.finish();
  return have;
}

// Checks a complete .incomplete file against the target; on a mismatch removes it and throws.
void verify(const fs::path& part, const RepoCache& cache, const BlobTarget& t, uint64_t have, Digest* sha256) {
  const auto discard = [&](const std::string& problem) {
    std::error_code ec;
    fs::remove(part, ec);
    hub_fail(ErrorKind::kIntegrity, "integrity check failed for '", t.path, "' of '", cache.repo(), "' at commit ",
             t.commit, ": ", problem, "; the download was discarded (run again to retry)");
  };
  if (t.size > 0 && have != t.size) discard(cat("got ", have, " bytes, the Hub reports ", t.size));
  if (!t.sha256.empty()) {
    if (const std::string got = sha256->hex(); got != t.sha256) discard("sha256 " + got + ", the Hub reports " + t.sha256);
  } else if (!t.git_sha1.empty()) {
    if (const std::string got = git_blob_sha1_file(part); got != t.git_sha1)
      discard("git blob sha1 " + got + ", the Hub reports " + t.git_sha1);
  }
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void write_all(int fd, const char* data, size_t n, const fs::path& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) disk_error(path, w < 0 ? errno : ENOSPC, "writing");
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void check_free_space(const fs::path& dir, uint64_t need, const std::string& what) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // cannot tell: let the writes speak
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (free_bytes < need)
    hub_fail(ErrorKind::kDisk, "not enough disk space for ", what, ": it needs ", format_bytes(need), ", ",
             format_bytes(free_bytes), " are free in '", dir.string(),
             "' (free some, `lfm models rm` deletes cached models, or point HF_HUB_CACHE at a larger disk)");
}

void expected_digests(BlobTarget& t, bool lfs, const std::string& api_digest) {
  const std::string etag = lowercase(t.etag), api_lower = lowercase(api_digest);
  const EtagKind kind = etag_kind(etag);
  // Two sources that both name a digest must agree; the ETag of an LFS file without X-Linked-Etag
  // is its pointer's git sha1, not the content's, so the API's sha256 speaks for LFS files.
  const auto agree = [&](const std::string& a, const std::string& b, const char* what) {
    if (!a.empty() && !b.empty() && a != b)
      hub_fail(ErrorKind::kIntegrity, "the Hub gives '", t.path, "' two different ", what, "s (ETag ", a, ", API ", b,
               "); not downloading it");
  };
  const std::string etag_sha256 = kind == EtagKind::kSha256 ? etag : "";
  const std::string api = lfs && etag_kind(api_lower) == EtagKind::kSha256 ? api_lower : "";
  agree(etag_sha256, api, "sha256");
  t.sha256 = !etag_sha256.empty() ? etag_sha256 : api;
  if (!t.sha256.empty() || lfs) return;  // an LFS file: its sha256, if any, is what counts
  const std::string etag_sha1 = kind == EtagKind::kGitSha1 ? etag : "";
  const std::string api_sha1 = etag_kind(api_lower) == EtagKind::kGitSha1 ? api_lower : "";
  agree(etag_sha1, api_sha1, "git blob sha1");
  t.git_sha1 = !etag_sha1.empty() ? etag_sha1 : api_sha1;
}

bool fetch_blob(const HttpClient& http, const Settings& s, const RepoCache& cache, const BlobTarget& t) {
  LFM_CHECK(safe_blob_name(t.etag), "hub: the Hub gave '", t.path, "' of '", cache.repo(), "' an unusable ETag '",
            t.etag, "'");
  if (!checkable(t) && t.size == 0)
    hub_fail(ErrorKind::kIntegrity, "the Hub gives neither a digest nor a size for '", t.path, "' of '", cache.repo(),
             "': refusing to store a file whose transfer could not be checked");
  const fs::path blob = cache.blob(t.etag);
  std::error_code ec;
  if (fs::is_regular_file(blob, ec)) {
    cache.link(t.commit, t.path, t.etag);
    return false;
  }
  fs::create_directories(blob.parent_path(), ec);
  if (ec) hub_fail(ErrorKind::kDisk, "cannot create '", blob.parent_path().string(), "': ", ec.message());
  BlobLock lock(cache.lock_file(t.etag), s.progress);
  if (fs::is_regular_file(blob, ec)) {  // another process finished it while we waited
    cache.link(t.commit, t.path, t.etag);
    return false;
  }
  const fs::path part = cache.incomplete(t.etag);
  if (t.size > 0) {
    const uint64_t have = file_size_or_zero(part);
    check_free_space(blob.parent_path(), t.size > have ? t.size - have : 0, "'" + t.path + "' of '" + cache.repo() + "'");
  }
  std::optional<Digest> sha256;
  if (!t.sha256.empty()) sha256.emplace(Digest::Algo::kSha256);
  uint64_t have = 0;
  for (int attempt = 1;; ++attempt) {
    try {
      have = transfer(http, s, cache, t, sha256 ? &*sha256 : nullptr);
      break;
    } catch (const HubError& e) {
      if (e.kind() != ErrorKind::kInterrupted) throw;
      if (attempt >= s.attempts)
        hub_fail(ErrorKind::kInterrupted, e.what(), " (after ", attempt, " tries; the ", file_size_or_zero(part),
                 " bytes received are kept in '", part.string(), "' and the next run ",
                 checkable(t) ? "resumes from there)" : "starts over: nothing would check joined bytes)");
      if (s.progress) std::fprintf(stderr, "%s; resuming\n", e.what());
      std::this_thread::sleep_for(std::chrono::duration<double>(s.retry_delay_s * attempt));
    }
  }
  verify(part, cache, t, have, sha256 ? &*sha256 : nullptr);
  fs::rename(part, blob, ec);
  if (ec) hub_fail(ErrorKind::kDisk, "cannot move '", part.string(), "' to '", blob.string(), "': ", ec.message());
  cache.link(t.commit, t.path, t.etag);
  return true;
}

}  // namespace lfm::hub
