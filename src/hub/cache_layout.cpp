#include "hub/cache_layout.h"

#include "core/error.h"
#include "core/file_io.h"
#include "core/output_file.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <system_error>

#include "hub/hub_error.h"

namespace lfm::hub {
namespace {

namespace fs = std::filesystem;

// A name no other writer uses: the process id and a counter.
std::string temp_suffix() {
  static int counter = 0;
  return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++counter);
}

void make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) hub_fail(ErrorKind::kDisk, "cannot create the cache folder '", dir.string(), "': ", ec.message());
}

}  // namespace

std::string repo_folder_name(const std::string& repo) {
  std::string out = "models--";
  for (char c : repo) {
    if (c == '/')
      out += "--";
    else
      out += c;
  }
  return out;
}

std::optional<std::string> repo_from_folder_name(const std::string& folder) {
  const std::string prefix = "models--";
  if (folder.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = folder.substr(prefix.size());
  const size_t sep = rest.find("--");
  // A repo without an owner ("models--gpt2") is a legacy canonical model; keep it as is.
  if (sep == std::string::npos) return rest.empty() ? std::nullopt : std::optional<std::string>(rest);
  return rest.substr(0, sep) + "/" + rest.substr(sep + 2);
}

std::string normalize_etag(const std::string& raw) {
  std::string e = raw;
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool safe_blob_name(const std::string& etag) {
  if (etag.empty() || etag.size() > 255 || etag == "." || etag == "..") return false;
  return std::all_of(etag.begin(), etag.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+' || c == '=';
  });
}

bool safe_relative_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  if (std::any_of(path.begin(), path.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == '\\'; }))
    return false;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '/');)
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

RepoCache::RepoCache(fs::path cache_dir, std::string repo)
    : cache_dir_(std::move(cache_dir)), repo_(std::move(repo)), dir_(cache_dir_ / repo_folder_name(repo_)) {}

fs::path RepoCache::lock_file(const std::string& etag) const {
  return cache_dir_ / ".locks" / repo_folder_name(repo_) / (etag + ".lock");
}

std::optional<std::string> RepoCache::read_ref(const std::string& revision) const {
  if (!safe_relative_path(revision)) return std::nullopt;
  if (!is_regular_path((dir_ / "refs" / revision).string())) return std::nullopt;
  std::ifstream in(dir_ / "refs" / revision);
  std::string commit;
  if (!in || !std::getline(in, commit)) return std::nullopt;
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
  if (!safe_blob_name(commit)) return std::nullopt;
  return commit;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  LFM_CHECK(safe_relative_path(revision), "hub: revision '", revision, "' cannot be stored under refs/");
  const fs::path path = dir_ / "refs" / revision;
  if (read_ref(revision) == commit) return;
  make_dirs(path.parent_path());
  try {
    // An exclusive temporary file beside it (core/output_file.h); the bare hash, no newline, as
    // huggingface_hub writes it.
    write_file_atomically(path.string(), commit, "hub");
  } catch (const Error& e) {
    hub_fail(ErrorKind::kDisk, "cannot write '", path.string(), "': ", e.what());
  }
}

void RepoCache::link(const std::string& commit, const std::string& path, const std::string& etag) const {
  const fs::path link_path = snapshot(commit) / path;
  make_dirs(link_path.parent_path());
  // snapshots/<commit>/a/b → ../../../blobs/<etag>: up one level per folder of the path, plus two.
  std::string target;
  for (size_t depth = std::count(path.begin(), path.end(), '/') + 2; depth > 0; --depth) target += "../";
  target += "blobs/" + etag;
  std::error_code ec;
  if (fs::is_symlink(link_path, ec) && fs::read_symlink(link_path, ec) == fs::path(target)) return;
  const fs::path tmp = link_path.string() + temp_suffix();
  fs::create_symlink(target, tmp, ec);
  if (!ec) fs::rename(tmp, link_path, ec);
  if (ec) {
    fs::remove(tmp);
    hub_fail(ErrorKind::kDisk, "cannot link '", link_path.string(), "' to '", target, "': ", ec.message());
  }
}

bool RepoCache::has_file(const std::string& commit, const std::string& path) const {
  std::error_code ec;
  return safe_relative_path(path) && fs::is_regular_file(snapshot(commit) / path, ec);
}

std::vector<std::string> RepoCache::snapshot_files(const std::string& commit) const {
  std::vector<std::string> out;
  const fs::path root = snapshot(commit);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (fs::is_regular_file(it->path(), e2))  // follows the symlink: a dangling one is skipped
      out.push_back(it->path().lexically_relative(root).generic_string());  // not fs::relative: it would follow the link
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace lfm::hub
