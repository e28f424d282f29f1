#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"

namespace lfm {

namespace fs = std::filesystem;

namespace {

std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ (uint64_t(::getpid()) << 32)};
  static const char* digits = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (int i = 0; i < 12; ++i) s += digits[rng() % 36];
  return s;
}

// The entry `path` names: its folder resolved (symlinks included), its last component as written.
// Where a rename to `path` lands.
fs::path entry_of(const std::string& path) {
  const fs::path p = fs::absolute(path).lexically_normal();
  std::error_code ec;
  fs::path parent = fs::weakly_canonical(p.parent_path(), ec);
  if (ec) parent = p.parent_path();
  return parent / p.filename();
}

// The file `path` finally names (every symlink resolved as far as the path exists).
fs::path target_of(const std::string& path) {
  std::error_code ec;
  fs::path t = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? fs::absolute(path).lexically_normal() : t;
}

}  // namespace

OutputFile::OutputFile(std::string path, std::string_view what) : path_(std::move(path)), what_(what) {
  const fs::path p(path_);
  LFM_CHECK(!p.filename().empty() && p.filename() != "." && p.filename() != "..", what_, ": '", path_,
            "' does not name a file");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  int fd = -1;
  for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
    temp_ = (dir / ("." + p.filename().string() + ".lfm-tmp-" + random_suffix())).string();
    fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  LFM_CHECK(fd >= 0, what_, ": cannot create a temporary file in '", dir.string(), "' for '", path_,
            "': ", std::strerror(errno));
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp_.c_str());
    fail(what_, ": cannot write '", temp_, "': ", std::strerror(err));
  }
}

OutputFile::~OutputFile() {
  if (f_) std::fclose(f_);
  if (!committed_) ::unlink(temp_.c_str());
}

void OutputFile::commit() {
  LFM_CHECK(f_ && !committed_, what_, ": '", path_, "' was already committed");
  const bool flushed = std::fflush(f_) == 0 && !std::ferror(f_);
  const int err = errno;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  LFM_CHECK(flushed && closed, what_, ": writing '", temp_, "' failed: ", std::strerror(err), " (disk full?)");
  // rename(2) replaces the directory entry `path_`: a symlink there is replaced, not followed.
  LFM_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, what_, ": cannot rename '", temp_, "' to '", path_,
            "': ", std::strerror(errno));
  committed_ = true;
}

void write_file_atomically(const std::string& path, std::string_view text, std::string_view what) {
  OutputFile out(path, what);
  LFM_CHECK(std::fwrite(text.data(), 1, text.size(), out.stream()) == text.size(), what, ": writing '",
            out.temp_path(), "' failed: ", std::strerror(errno));
  out.commit();
}

std::optional<FileIdentity> file_identity(const std::string& path, bool follow_symlinks) {
  struct stat st {};
  const int r = follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (r != 0) return std::nullopt;
  return FileIdentity{st.st_dev, st.st_ino};
}

void check_output_spares_input(const std::string& output, const std::string& input, std::string_view what) {
  const auto refuse = [&](const std::string& how) {
    fail(what, ": the output '", output, "' ", how, " the input '", input,
         "'; writing it would destroy the input: choose another output path");
  };
  const auto out_follow = file_identity(output, true), out_entry = file_identity(output, false);
  const fs::path out_target = target_of(output), out_name = entry_of(output);
  // The input's files: itself, or every entry directly in its folder.
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(input, ec)) {
    for (const auto& e : fs::directory_iterator(input, ec)) files.push_back(e.path().string());
    const auto dir = file_identity(input, true);
    if (dir && (out_follow == dir || out_entry == dir)) refuse("is the folder of");
  } else {
    files.push_back(input);
  }
  for (const std::string& f : files) {
    const auto id = file_identity(f, true), link = file_identity(f, false);
    const bool same = (id && (out_follow == id || out_entry == id)) || (link && (out_follow == link || out_entry == link)) ||
                      target_of(f) == out_target || entry_of(f) == out_name;
    if (same) refuse(files.size() == 1 && f == input ? "is the same file as" : "would replace '" + f + "', a file of");
  }
}

void check_distinct_outputs(const std::string& a, const std::string& b, std::string_view what) {
  const auto ia = file_identity(a, true), ib = file_identity(b, true);
  const bool same = entry_of(a) == entry_of(b) || target_of(a) == target_of(b) || (ia && ia == ib);
  LFM_CHECK(!same, what, ": '", a, "' and '", b, "' are the same file; the second would overwrite the first");
}

}  // namespace lfm
