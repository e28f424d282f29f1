// Streaming safetensors writer: the header (names, dtypes, shapes, offsets) is declared up
// front, then tensor bytes are appended in declaration order, so a multi-GB checkpoint is never
// held in memory. Written under a temporary name created exclusively beside the path
// (core/output_file.h) and renamed into place by finish().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/output_file.h"

namespace lfm {

class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype;  // F32, F16 or BF16
    std::vector<int64_t> shape;
  };

  // Writes the header immediately; tensors must then be written in the same order.
  SafetensorsWriter(const std::string& path, const std::vector<Entry>& entries,
                    const std::map<std::string, std::string>& metadata = {});
  // Appends the next tensor's bytes; `bytes` must equal its declared size.
  void write(const std::string& name, const void* data, size_t bytes);
  // Checks that every tensor was written, flushes and renames the file into place.
  void finish();

 private:
  void put(const void* data, size_t bytes);
  std::unique_ptr<OutputFile> out_;
  std::string path_;
  std::vector<Entry> entries_;
  std::vector<size_t> sizes_;
  size_t next_ = 0;
};

}  // namespace lfm
