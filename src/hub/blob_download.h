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
};

// Makes snapshots/<commit>/<path> point at a complete, verified blob, downloading it if needed.
// Returns whether bytes were downloaded. Transfers that break off are retried (resuming) up to
// settings.attempts times; afterwards the partial file is kept for the next run.
bool fetch_blob(const HttpClient& http, const Settings& s, const RepoCache& cache, const BlobTarget& t);

// Appends bytes to an open file; a failed write throws HubError kDisk naming the file ("disk
// full" for ENOSPC). Public for tests (they write to /dev/full).
void write_all(int fd, const char* data, size_t n, const std::filesystem::path& path);

// Throws HubError kDisk when the file system holding `dir` has fewer than `need` bytes free.
void check_free_space(const std::filesystem::path& dir, uint64_t need, const std::string& what);

}  // namespace lfm::hub
