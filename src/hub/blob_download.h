// Downloads one file of a repository into the cache the way huggingface_hub does: under a lock,
// into blobs/<etag>.incomplete (resumed with a Range request when a previous try left one),
// checked against the ETag's hash, renamed into blobs/<etag> only when it is right, then linked
// from snapshots/<commit>/<path>.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "hub/cache_layout.h"
#include "hub/http_client.h"
#include "hub/settings.h"

namespace lfm::hub {

struct BlobTarget {
  std::string path;    // inside the repo
  std::string commit;  // the snapshot it belongs to
  std::string etag;    // normalised blob name (sha256 for LFS files, git sha1 otherwise)
  uint64_t size = 0;   // expected bytes; 0 when unknown
  std::string url;     // resolve URL
  // What the bytes must hash to, lowercase hex, where anything said so (expected_digests): the
  // sha256 of an LFS file, the git blob sha1 of a regular one; both empty: nothing to check.
  std::string sha256, git_sha1;
};

// The digests a file must have, from every source the Hub offers: its ETag (any case; X-Linked-Etag
// for LFS files) and the revision API's entry (`lfs`: an LFS file, whose `api_digest` is its
// lfs.sha256; otherwise the blobId, a git blob sha1). Fills t.sha256 and t.git_sha1.
void expected_digests(BlobTarget& t, bool lfs, const std::string& api_digest);

// Makes snapshots/<commit>/<path> point at a complete, verified blob, downloading it if needed.
// Returns whether bytes were downloaded. Transfers that break off are retried up to
// settings.attempts times, resuming when a digest will check the joined bytes (starting over
// otherwise); afterwards the partial file is kept for the next run. Never stores a blob that
// does not match its digest, or, without one, its announced size; refuses a file that has
// neither (nothing could tell a cut or substituted transfer from the real one).
bool fetch_blob(const HttpClient& http, const Settings& s, const RepoCache& cache, const BlobTarget& t);

// Appends bytes to an open file; a failed write throws HubError kDisk naming the file ("disk
// full" for ENOSPC). Public for tests (they write to /dev/full).
void write_all(int fd, const char* data, size_t n, const std::filesystem::path& path);

// Throws HubError kDisk when the file system holding `dir` has fewer than `need` bytes free.
void check_free_space(const std::filesystem::path& dir, uint64_t need, const std::string& what);

}  // namespace lfm::hub
