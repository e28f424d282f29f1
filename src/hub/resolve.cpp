#include "hub/resolve.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/file_io.h"
#include "hub/blob_download.h"
#include "hub/cache_layout.h"
#include "hub/hub_api.h"
#include "hub/hub_error.h"
#include "hub/progress.h"

namespace lfm::hub {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) { return read_regular_file(p.string(), "hub:"); }

// "Last used" in `lfm models list` is a blob's access time; set it explicitly, since relatime
// and noatime mounts would not.
void mark_used(const RepoCache& cache, const Resolved& r) {
  const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  for (const auto& f : r.files) ::utimensat(AT_FDCWD, (cache.snapshot(r.commit) / f).c_str(), times, 0);
}

Resolved finish(const RepoCache& cache, const Selection& sel, const std::string& commit, std::vector<std::string> files) {
  Resolved r;
  r.commit = commit;
  r.files = std::move(files);
  r.path = (sel.gguf ? cache.snapshot(commit) / sel.files[0] : cache.snapshot(commit)).string();
  mark_used(cache, r);
  return r;
}

// The model from the cache alone. Throws kNotCached saying what is missing.
Resolved from_cache(const RepoCache& cache, const ModelRef& ref, Need need, const std::string& why) {
  const auto missing = [&](const std::string& what) -> HubError {
    return HubError(ErrorKind::kNotCached, cat(why, " and '", ref.str(), "' ", what, " in the cache at '",
                                               cache.cache_dir().string(), "'; download it once while online (`lfm pull ",
                                               ref.str(), "`)"));
  };
  std::string commit = ref.revision;
  if (!is_commit_hash(commit)) {
    const auto c = cache.read_ref(ref.revision);
    if (!c) throw missing("is not");
    commit = *c;
  }
  const std::vector<std::string> listing = cache.snapshot_files(commit);
  if (listing.empty()) throw missing("is not");
  Selection sel;
  try {
    sel = select_files(listing, ref, need);
  } catch (const HubError& e) {
    throw missing(cat("is only partly (snapshot ", commit.substr(0, 12), ": ", e.what(), ")"));
  }
  std::vector<std::string> files = sel.files;
  if (!sel.sharded_index.empty()) {
    for (const auto& shard : index_shards(read_text(cache.snapshot(commit) / sel.sharded_index), sel.sharded_index)) {
      if (!cache.has_file(commit, shard)) throw missing(cat("is only partly (shard '", shard, "' is missing)"));
      files.push_back(shard);
    }
  }
  Resolved r = finish(cache, sel, commit, files);
  r.from_cache_only = true;
  return r;
}

}  // namespace

Resolved resolve(const ModelRef& ref, Need need, const Settings& s) {
  const RepoCache cache(s.cache_dir, ref.repo);
  if (s.offline) return from_cache(cache, ref, need, "HF_HUB_OFFLINE is set");
  const HttpClient http(s);
  RepoInfo info;
  try {
    info = fetch_repo_info(http, s, ref.repo, ref.revision);
  } catch (const HubError& e) {
    // The Hub is down or unreachable: what the cache holds for this revision is the answer, as in
    // huggingface_hub. Errors the Hub states (401, 404) are not papered over.
    if (e.kind() != ErrorKind::kNetwork && !(e.kind() == ErrorKind::kHttp && e.status() >= 500)) throw;
    try {
      Resolved r = from_cache(cache, ref, need, "the Hub is unreachable");
      r.note = cat(e.what(), "; using the cached snapshot ", r.commit.substr(0, 12), " of '", ref.repo, "'");
      return r;
    } catch (const HubError& cached) {
      if (cached.kind() != ErrorKind::kNotCached) throw;
      hub_fail(e.kind(), e.what(), " while looking up '", ref.str(), "', and it is not (fully) in the cache at '",
               s.cache_dir.string(), "'. Check the network (HF_ENDPOINT is ", s.endpoint,
               "); models already in the cache run without it, also with HF_HUB_OFFLINE=1");
    }
  }
  std::vector<std::string> listing;
  std::map<std::string, RepoFile> by_path;
  for (const auto& f : info.files) {
    listing.push_back(f.path);
    by_path[f.path] = f;
  }
  const Selection sel = select_files(listing, ref, need);

  // Fail before the first byte when the files cannot fit.
  uint64_t need_bytes = 0;
  for (const auto& f : sel.files)
    if (!cache.has_file(info.commit, f)) need_bytes += by_path[f].size;
  fs::path probe = s.cache_dir;
  while (!probe.empty() && !fs::exists(probe) && probe != probe.parent_path()) probe = probe.parent_path();
  if (need_bytes > 0) check_free_space(probe, need_bytes, "'" + ref.str() + "'");
  if (s.progress && need_bytes > 0)
    std::fprintf(stderr, "downloading %s (commit %s, %s) into %s\n", ref.str().c_str(), info.commit.substr(0, 12).c_str(),
                 format_bytes(need_bytes).c_str(), cache.dir().c_str());

  int downloaded = 0;
  const auto fetch = [&](const std::string& path) {
    if (cache.has_file(info.commit, path)) return;
    FileMeta m = fetch_file_meta(http, s, ref.repo, info.commit, path);
    if (m.etag.empty()) m.etag = by_path[path].etag;  // a mirror without ETags: the API's blob id
    if (m.etag.empty())
      hub_fail(ErrorKind::kHttp, "the Hub at ", s.endpoint, " gave no ETag for '", path, "' of '", ref.repo,
               "' (is HF_ENDPOINT a Hugging Face Hub?)");
    BlobTarget t{path, info.commit, m.etag, m.size ? m.size : by_path[path].size,
                 resolve_url(s, ref.repo, info.commit, path), {}, {}};
    const RepoFile& listed = by_path[path];
    expected_digests(t, listed.lfs, listed.etag);
    downloaded += fetch_blob(http, s, cache, t) ? 1 : 0;
  };
  std::vector<std::string> files = sel.files;
  for (const auto& f : sel.files) fetch(f);
  if (!sel.sharded_index.empty()) {
    for (const auto& shard : index_shards(read_text(cache.snapshot(info.commit) / sel.sharded_index), sel.sharded_index)) {
      if (!by_path.count(shard))
        hub_fail(ErrorKind::kUsage, "'", sel.sharded_index, "' of '", ref.repo, "' lists the shard '", shard,
                 "' but the repository has no such file");
      fetch(shard);
      files.push_back(shard);
    }
  }
  if (ref.revision != info.commit) cache.write_ref(ref.revision, info.commit);
  Resolved r = finish(cache, sel, info.commit, files);
  r.downloaded = downloaded;
  return r;
}

std::string resolve_model_arg(const std::string& arg, Need need, const Settings& s) {
  std::error_code ec;
  if (fs::exists(arg, ec)) return arg;
  const auto ref = parse_model_ref(arg);
  if (!ref) return arg;
  try {
    const Resolved r = resolve(*ref, need, s);
    if (!r.note.empty()) std::fprintf(stderr, "lfm: %s\n", r.note.c_str());
    return r.path;
  } catch (const HubError& e) {
    // The user may have meant a local path that is not there.
    const std::string msg = e.what();
    if (e.kind() == ErrorKind::kHttp && msg.find("was not found") != std::string::npos)
      throw HubError(e.kind(), msg + " (and there is no local path '" + arg + "')", e.status());
    throw;
  }
}

}  // namespace lfm::hub
