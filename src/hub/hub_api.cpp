#include "hub/hub_api.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "hub/cache_layout.h"
#include "hub/hub_error.h"

namespace lfm::hub {
namespace {

using json = nlohmann::json;

std::string what_of(const std::string& repo, const std::string& revision, const std::string& path) {
  std::string w = path.empty() ? "repository '" + repo + "'" : "file '" + path + "' of repository '" + repo + "'";
  return w + " at revision '" + revision + "'";
}

uint64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  return end && *end == '\0' ? v : 0;
}

}  // namespace

std::string resolve_url(const Settings& s, const std::string& repo, const std::string& revision, const std::string& path) {
  return s.endpoint + "/" + repo + "/resolve/" + url_encode(revision, false) + "/" + url_encode(path, true);
}

void throw_http_error(const HttpResponse& r, const Settings& s, const std::string& repo, const std::string& revision,
                      const std::string& path) {
  const std::string code = r.header("x-error-code");
  std::string server = r.header("x-error-message");
  if (server.empty() && r.body.size() < 400 && r.body.find('<') == std::string::npos) server = r.body;
  const std::string said = server.empty() ? "" : " (the Hub says: " + server + ")";
  const std::string what = what_of(repo, revision, path);
  const std::string page = s.endpoint + "/" + repo;
  const long st = r.status;
  if (code == "GatedRepo" || ((st == 401 || st == 403) && !path.empty())) {
    const std::string fix = s.token.empty()
                                ? "set HF_TOKEN to an access token of an account that has accepted its terms on " + page
                                : "the token in HF_TOKEN has no access: accept the repository's terms on " + page +
                                      " with that account, or use a token with read access";
    throw HubError(ErrorKind::kHttp, cat("HTTP ", st, ": access to ", what, " is restricted (a gated or private repository); ",
                                         fix, said), st);
  }
  if (st == 401 || st == 403 || code == "RepoNotFound") {
    // The Hub answers 401 for private repositories and for ones that do not exist alike.
    throw HubError(ErrorKind::kHttp,
                   cat("HTTP ", st, ": repository '", repo, "' was not found on ", s.endpoint,
                       s.token.empty() ? " (if it is private or gated, set HF_TOKEN to an access token that can read it)"
                                       : " (or the token in HF_TOKEN cannot read it)",
                       said),
                   st);
  }
  if (st == 404 && code == "RevisionNotFound")
    throw HubError(ErrorKind::kHttp, cat("HTTP 404: revision '", revision, "' of repository '", repo, "' does not exist", said), st);
  if (st == 404 && !path.empty())
    throw HubError(ErrorKind::kHttp, cat("HTTP 404: ", what, " does not exist", said), st);
  if (st == 404)
    throw HubError(ErrorKind::kHttp, cat("HTTP 404: ", what, " was not found on ", s.endpoint, said), st);
  if (st == 429)
    throw HubError(ErrorKind::kHttp, cat("HTTP 429: the Hub is rate-limiting requests for ", what,
                                         "; wait and retry, or set HF_TOKEN (authenticated requests get a higher limit)", said),
                   st);
  throw HubError(ErrorKind::kHttp, cat("HTTP ", st, " from ", r.url.empty() ? s.endpoint : r.url, " for ", what, said), st);
}

RepoInfo fetch_repo_info(const HttpClient& http, const Settings& s, const std::string& repo, const std::string& revision) {
  const std::string url = s.endpoint + "/api/models/" + repo + "/revision/" + url_encode(revision, false) + "?blobs=true";
  const HttpResponse r = http.get(url);
  if (r.status != 200) throw_http_error(r, s, repo, revision, "");
  RepoInfo info;
  check_json_depth(r.body, cat("hub: the revision API's answer for ", repo));
  try {
    const json j = json::parse(r.body);
    info.commit = j.at("sha").get<std::string>();
    for (const auto& f : j.value("siblings", json::array())) {
      RepoFile rf;
      rf.path = f.at("rfilename").get<std::string>();
      if (f.contains("lfs") && f["lfs"].is_object()) {
        rf.etag = f["lfs"].value("sha256", "");
        rf.size = f["lfs"].value("size", uint64_t{0});
        rf.lfs = true;
      } else {
        rf.etag = f.value("blobId", "");
        rf.size = f.value("size", uint64_t{0});
      }
      if (safe_relative_path(rf.path)) info.files.push_back(rf);  // never a path that leaves the snapshot
    }
  } catch (const json::exception& e) {
    hub_fail(ErrorKind::kHttp, "the Hub's answer for ", what_of(repo, revision, ""), " is not the JSON expected (",
             e.what(), ") from ", url);
  }
  LFM_CHECK(safe_blob_name(info.commit), "hub: the Hub gave an invalid commit '", info.commit, "' for ",
            what_of(repo, revision, ""));
  return info;
}

FileMeta fetch_file_meta(const HttpClient& http, const Settings& s, const std::string& repo, const std::string& commit,
                         const std::string& path) {
  const HttpResponse r = http.head(resolve_url(s, repo, commit, path));
  if (r.status >= 400 || r.status < 200) throw_http_error(r, s, repo, commit, path);
  FileMeta m;
  m.etag = normalize_etag(!r.header("x-linked-etag").empty() ? r.header("x-linked-etag") : r.header("etag"));
  m.commit = r.header("x-repo-commit");
  // A redirect's Content-Length is its own (empty) body's; only X-Linked-Size speaks for the file.
  const bool redirect = r.status >= 300 && r.status < 400;
  m.size = parse_size(!r.header("x-linked-size").empty() ? r.header("x-linked-size")
                      : redirect                         ? std::string()
                                                         : r.header("content-length"));
  return m;
}

}  // namespace lfm::hub
