// Writing files safely where a path names them (converted models, random checkpoints, Hub cache
// entries; issue 55). A file is written under a temporary name created exclusively in its own
// folder (O_CREAT | O_EXCL | O_NOFOLLOW, a fresh random name), so a symlink planted at any name
// lfm uses is never followed, and renamed over its path at the end: the rename replaces a symlink
// at the path itself, never its target, and an interrupted write leaves the old file whole.
// Inputs are protected by identity, not by spelling: `./in.gguf`, `sub/../in.gguf`, a hard link or
// a symlink to an input all name the same device and inode.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace lfm {

class OutputFile {
 public:
  // Creates "<folder of path>/.<name of path>.lfm-tmp-<random>" (mode 0666 less the umask).
  // Throws lfm::Error "<what>: cannot create a temporary file in '<folder>': <reason>".
  OutputFile(std::string path, std::string_view what);
  ~OutputFile();  // removes the temporary file unless commit() ran
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // A buffered stream over the temporary file (owned: closed by commit() or the destructor).
  std::FILE* stream() const { return f_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  // Flushes and closes the stream (errors name the temporary file: a full disk), then renames it
  // over path(). Throws lfm::Error; the temporary file is then removed.
  void commit();

 private:
  std::string path_, temp_, what_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

// Writes `text` to `path` through an OutputFile.
void write_file_atomically(const std::string& path, std::string_view text, std::string_view what);

struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileIdentity&) const = default;
};
// The device and inode `path` names (following symlinks, or the link itself); nullopt when it
// does not exist.
std::optional<FileIdentity> file_identity(const std::string& path, bool follow_symlinks = true);

// Throws lfm::Error "<what>: the output '<output>' is <how> the input '<input>' ...; choose another
// output path" when writing `output` (a file renamed into place) would replace `input` or one of
// its files: `input` is a file or a folder (a Hugging Face checkpoint: every entry directly in it
// counts), compared by identity (device + inode, links followed or not) and by canonical path.
// Both paths appear as given.
void check_output_spares_input(const std::string& output, const std::string& input, std::string_view what);

// Throws when two outputs would be the same file (canonical paths, or identity when they exist).
void check_distinct_outputs(const std::string& a, const std::string& b, std::string_view what);

}  // namespace lfm
