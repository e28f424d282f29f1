// The on-disk layout of huggingface_hub's cache, so files downloaded by Python tools are reused
// here and the other way round:
//   <cache>/models--owner--name/blobs/<etag>                 file contents, named by git sha1 or LFS sha256
//   <cache>/models--owner--name/blobs/<etag>.incomplete      a download in progress (resumable)
//   <cache>/models--owner--name/snapshots/<commit>/<path>    relative symlinks to ../../blobs/<etag>
//   <cache>/models--owner--name/refs/<revision>              the commit a branch or tag pointed to
//   <cache>/.locks/models--owner--name/<etag>.lock           held while a blob is downloaded
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace lfm::hub {

// "owner/name" → "models--owner--name".
std::string repo_folder_name(const std::string& repo);
// "models--owner--name" → "owner/name"; nullopt for anything else (datasets--, stray folders).
std::optional<std::string> repo_from_folder_name(const std::string& folder);

// An ETag as a blob name: without a weak "W/" prefix and quotes.
std::string normalize_etag(const std::string& raw);
// Blob names, commits and revisions come from the network: refuse anything that could step out
// of the cache (a '/' in a blob name, '..' anywhere, control characters).
bool safe_blob_name(const std::string& etag);
bool safe_relative_path(const std::string& path);

class RepoCache {
 public:
  RepoCache(std::filesystem::path cache_dir, std::string repo);

  const std::string& repo() const { return repo_; }
  const std::filesystem::path& cache_dir() const { return cache_dir_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path blob(const std::string& etag) const { return dir_ / "blobs" / etag; }
  std::filesystem::path incomplete(const std::string& etag) const { return dir_ / "blobs" / (etag + ".incomplete"); }
  std::filesystem::path snapshot(const std::string& commit) const { return dir_ / "snapshots" / commit; }
  std::filesystem::path lock_file(const std::string& etag) const;

  // The commit refs/<revision> holds, if any.
  std::optional<std::string> read_ref(const std::string& revision) const;
  // Writes refs/<revision> (atomically: a temporary file renamed over it).
  void write_ref(const std::string& revision, const std::string& commit) const;
  // Points snapshots/<commit>/<path> at blobs/<etag> with a relative symlink, replaced atomically.
  void link(const std::string& commit, const std::string& path, const std::string& etag) const;
  // Whether snapshots/<commit>/<path> exists and leads to an existing file.
  bool has_file(const std::string& commit, const std::string& path) const;
  // Every file of a snapshot whose target exists, as '/'-separated paths relative to it.
  std::vector<std::string> snapshot_files(const std::string& commit) const;

 private:
  std::filesystem::path cache_dir_;
  std::string repo_;
  std::filesystem::path dir_;
};

}  // namespace lfm::hub
