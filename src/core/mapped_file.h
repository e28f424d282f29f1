// Read-only memory map of a whole file. Weights are served straight from the mapping until the
// model lets go of the file (detach_from_file). Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lfm {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws lfm::Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Hands the whole pages inside [p, p + n) back to the OS (they are read from the file again on
  // the next touch): for bytes that a packed copy replaced. Ignores ranges outside the mapping.
  void drop_pages(const void* p, size_t n) const;
  // Ends the mapping's tie to the file, at the same addresses: the bytes of the `keep` ranges
  // (parts outside the mapping are ignored) are copied into anonymous memory in place and read as
  // before; every other byte reads as zero. A file truncated or rewritten in place afterwards can
  // no longer reach the process (a mapped page past a new end of file is SIGBUS on the next
  // touch). Costs the kept pages in memory. Throws lfm::Error naming the file if the OS refuses.
  void detach_from_file(std::vector<std::pair<const void*, size_t>> keep) const;

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lfm
