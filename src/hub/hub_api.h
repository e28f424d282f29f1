// The two Hub requests lfm makes before downloading: the revision API (which commit a branch is
// at, and which files it holds) and a HEAD on a file's resolve URL (its blob name and size). Turns
// error statuses into messages that say what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hub/http_client.h"
#include "hub/model_ref.h"
#include "hub/settings.h"

namespace lfm::hub {

struct RepoFile {
  std::string path;    // rfilename
  uint64_t size = 0;   // 0 when the API did not say
  std::string etag;    // lfs.sha256 or blobId when the API said, else ""
  bool lfs = false;    // an LFS file (etag is then its sha256)
};

struct RepoInfo {
  std::string commit;  // the revision's full commit hash ("sha")
  std::vector<RepoFile> files;
};

// GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true
RepoInfo fetch_repo_info(const HttpClient& http, const Settings& s, const std::string& repo, const std::string& revision);

struct FileMeta {
  std::string etag;    // normalised: X-Linked-Etag (LFS: the sha256) or ETag (git blob sha1)
  std::string commit;  // X-Repo-Commit
  uint64_t size = 0;   // X-Linked-Size or Content-Length; 0 when unknown
};

// HEAD {endpoint}/{repo}/resolve/{commit}/{path}
FileMeta fetch_file_meta(const HttpClient& http, const Settings& s, const std::string& repo, const std::string& commit,
                         const std::string& path);

std::string resolve_url(const Settings& s, const std::string& repo, const std::string& revision, const std::string& path);

// Throws the HubError (kHttp) an error status stands for: 401/403 name HF_TOKEN and gated or
// private repositories, 404 says which of repository, revision or file is missing.
[[noreturn]] void throw_http_error(const HttpResponse& r, const Settings& s, const std::string& repo,
                                   const std::string& revision, const std::string& path);

}  // namespace lfm::hub
