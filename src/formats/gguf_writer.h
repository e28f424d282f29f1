// Streaming GGUF v3 writer. Metadata and the tensor table (names, ggml dims, types) are declared
// first, so every offset is known before any data; then tensor bytes are streamed in declaration
// order, one piece at a time, and never held whole. The file is written under a temporary name
// created exclusively beside it (core/output_file.h: a planted symlink is never followed) and
// renamed into place by finish(), so an interrupted conversion leaves no half-written .gguf.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/output_file.h"
#include "formats/gguf_reader.h"

namespace lfm::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Adds or replaces a metadata entry (insertion order is kept). general.alignment is written
  // automatically.
  void set(const std::string& key, Value v);
  const Value* get(const std::string& key) const;

  // Declares the next tensor: ggml dims (ne[0] = row length) and storage type.
  void add_tensor(std::string name, std::vector<int64_t> ne, DType type);
  size_t tensor_count() const { return tensors_.size(); }
  uint64_t total_data_bytes() const { return data_bytes_; }

  // Writes header, metadata and tensor table to a temporary file beside `path`.
  void begin(const std::string& path);
  // Appends bytes of the current tensor (tensors in declaration order). A tensor is complete
  // when exactly its size has been written; padding to the alignment is added automatically.
  void write(const void* data, size_t n);
  // Checks every tensor was written in full, closes and renames the file into place.
  void finish();

 private:
  struct Planned {
    std::string name;
    std::vector<int64_t> ne;
    DType type;
    uint64_t nbytes, offset;
  };
  void put(const void* p, size_t n);
  void put_string(const std::string& s);
  void put_value(const Value& v);
  void pad_to_alignment(uint64_t written);

  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Planned> tensors_;
  uint64_t data_bytes_ = 0;
  std::unique_ptr<OutputFile> out_;
  std::FILE* f_ = nullptr;  // out_'s stream
  size_t current_ = 0;        // index of the tensor being written
  uint64_t current_done_ = 0;  // bytes of it written so far
  uint64_t file_pos_ = 0;
};

}  // namespace lfm::gguf
