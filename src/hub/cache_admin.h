// What `lfm models list` and `lfm models rm` see of the cache: repositories, their snapshots and
// the refs pointing at them, sizes on disk, and when they were last used.
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "hub/model_ref.h"

namespace lfm::hub {

struct CachedRevision {
  std::string commit;
  std::vector<std::string> refs;  // branches/tags whose refs/ file holds this commit
  uint64_t bytes = 0;             // the blobs its files point at
  int files = 0;
};

struct CachedRepo {
  std::string repo;
  std::filesystem::path dir;
  uint64_t bytes = 0;             // every file under blobs/ (partial downloads included)
  std::vector<CachedRevision> revisions;
  std::time_t last_used = 0;      // latest access time of its blobs (lfm sets it on every use)
  std::time_t last_modified = 0;  // latest modification time of its blobs
};

// Model repositories in the cache, by name. A missing cache folder is an empty cache.
std::vector<CachedRepo> scan_cache(const std::filesystem::path& cache_dir);

struct Removal {
  std::string what;     // "owner/name" or "owner/name@commit"
  uint64_t freed = 0;   // bytes of the files deleted
  std::vector<std::string> commits;
};

// Without a revision: deletes the repository's folder (and its locks). With one (branch, tag or
// commit): that snapshot, the refs that point at it, and the blobs no other snapshot uses.
// Throws HubError kNotCached when there is nothing to delete.
Removal remove_cached(const std::filesystem::path& cache_dir, const ModelRef& ref);

}  // namespace lfm::hub
