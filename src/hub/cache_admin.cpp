#include "hub/cache_admin.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "hub/cache_layout.h"
#include "hub/hub_error.h"

namespace lfm::hub {
namespace {

namespace fs = std::filesystem;

// refs/ files (nested for names like "refs/pr/1") → their commits.
std::map<std::string, std::string> read_refs(const RepoCache& cache) {
  std::map<std::string, std::string> refs;
  const fs::path root = cache.dir() / "refs";
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string name = it->path().lexically_relative(root).generic_string();
    if (const auto c = cache.read_ref(name)) refs[name] = *c;
  }
  return refs;
}

// The blob names a snapshot's files point at.
std::set<std::string> snapshot_blobs(const RepoCache& cache, const std::string& commit) {
  std::set<std::string> blobs;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(cache.snapshot(commit), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!fs::is_symlink(it->symlink_status(e2))) continue;
    blobs.insert(fs::read_symlink(it->path(), e2).filename().string());
  }
  return blobs;
}

std::vector<std::string> snapshot_commits(const RepoCache& cache) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(cache.dir() / "snapshots", ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory()) out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t size_of(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

CachedRepo scan_repo(const fs::path& cache_dir, const std::string& repo) {
  const RepoCache cache(cache_dir, repo);
  CachedRepo r;
  r.repo = repo;
  r.dir = cache.dir();
  std::error_code ec;
  for (fs::directory_iterator it(cache.dir() / "blobs", ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    r.bytes += static_cast<uint64_t>(st.st_size);
    r.last_used = std::max(r.last_used, st.st_atime);
    r.last_modified = std::max(r.last_modified, st.st_mtime);
  }
  const auto refs = read_refs(cache);
  for (const auto& commit : snapshot_commits(cache)) {
    CachedRevision rev;
    rev.commit = commit;
    for (const auto& [name, c] : refs)
      if (c == commit) rev.refs.push_back(name);
    for (const auto& b : snapshot_blobs(cache, commit)) {
      rev.bytes += size_of(cache.dir() / "blobs" / b);
      ++rev.files;
    }
    r.revisions.push_back(rev);
  }
  return r;
}

}  // namespace

std::vector<CachedRepo> scan_cache(const fs::path& cache_dir) {
  std::vector<CachedRepo> out;
  std::error_code ec;
  for (fs::directory_iterator it(cache_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) continue;
    if (const auto repo = repo_from_folder_name(it->path().filename().string())) out.push_back(scan_repo(cache_dir, *repo));
  }
  std::sort(out.begin(), out.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo < b.repo; });
  return out;
}

Removal remove_cached(const fs::path& cache_dir, const ModelRef& ref) {
  const RepoCache cache(cache_dir, ref.repo);
  std::error_code ec;
  if (!fs::is_directory(cache.dir(), ec))
    hub_fail(ErrorKind::kNotCached, "'", ref.repo, "' is not in the cache at '", cache_dir.string(), "'");
  const CachedRepo before = scan_repo(cache_dir, ref.repo);
  Removal out;
  if (!ref.revision_given) {
    out.what = ref.repo;
    out.freed = before.bytes;
    for (const auto& rev : before.revisions) out.commits.push_back(rev.commit);
    fs::remove_all(cache.dir(), ec);
    if (ec) hub_fail(ErrorKind::kDisk, "cannot delete '", cache.dir().string(), "': ", ec.message());
    fs::remove_all(cache_dir / ".locks" / repo_folder_name(ref.repo), ec);
    return out;
  }
  std::string commit = ref.revision;
  if (!fs::is_directory(cache.snapshot(commit), ec)) {
    const auto c = cache.read_ref(ref.revision);
    if (!c || !fs::is_directory(cache.snapshot(*c), ec)) {
      std::string cached;
      for (const auto& r : before.revisions) cached += (cached.empty() ? "" : ", ") + r.commit.substr(0, 12);
      hub_fail(ErrorKind::kNotCached, "revision '", ref.revision, "' of '", ref.repo, "' is not in the cache (cached: ",
               cached.empty() ? "none" : cached, ")");
    }
    commit = *c;
  }
  out.what = ref.repo + "@" + commit.substr(0, 12);
  out.commits = {commit};
  std::set<std::string> still_used;
  for (const auto& other : snapshot_commits(cache))
    if (other != commit)
      for (const auto& b : snapshot_blobs(cache, other)) still_used.insert(b);
  for (const auto& b : snapshot_blobs(cache, commit)) {
    if (still_used.count(b) || !safe_blob_name(b)) continue;
    const fs::path blob = cache.dir() / "blobs" / b;
    const uint64_t n = size_of(blob);
    if (fs::remove(blob, ec)) out.freed += n;
  }
  fs::remove_all(cache.snapshot(commit), ec);
  if (ec) hub_fail(ErrorKind::kDisk, "cannot delete '", cache.snapshot(commit).string(), "': ", ec.message());
  for (const auto& [name, c] : read_refs(cache))
    if (c == commit) fs::remove(cache.dir() / "refs" / name, ec);
  return out;
}

}  // namespace lfm::hub
