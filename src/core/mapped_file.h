// Read-only memory map of a whole file. Weights are served straight from the mapping; nothing
// is copied wholesale. Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lfm
