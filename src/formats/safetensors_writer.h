// Streaming safetensors writer: the header (names, dtypes, shapes, offsets) is declared up
// front, then tensor bytes are appended in declaration order, so a multi-GB checkpoint is never
// held in memory.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

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
  // Checks that every tensor was written and flushes.
  void finish();

 private:
  std::ofstream out_;
  std::string path_;
  std::vector<Entry> entries_;
  std::vector<size_t> sizes_;
  size_t next_ = 0;
};

}  // namespace lfm
