// Safetensors reader: memory-maps the file and validates the header completely before any
// tensor is touched (header length, JSON, dtypes, shapes, offsets in range, non-overlapping,
// sizes matching dtype × shape), so a truncated or hostile file is a clear error, never an
// out-of-bounds read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/mapped_file.h"
#include "formats/tensor_source.h"

namespace lfm {

class SafetensorsFile : public MapTensorSource {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws lfm::Error
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  void detach(const std::vector<std::pair<const void*, size_t>>& keep) const override { file_.detach_from_file(keep); }

 private:
  MappedFile file_;
  std::map<std::string, std::string> metadata_;
  std::vector<AlignedBuffer> copies_;  // for tensors whose mapped data is misaligned
};

// All tensors of a checkpoint folder: model.safetensors, or the shards named by
// model.safetensors.index.json. Duplicate names across shards are an error.
class SafetensorsCheckpoint : public TensorSource {
 public:
  explicit SafetensorsCheckpoint(const std::string& dir);
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string origin() const override { return origin_; }
  void detach(const std::vector<std::pair<const void*, size_t>>& keep) const override {
    for (const auto& f : files_) f->detach(keep);
  }
  size_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
  std::string origin_;
};

}  // namespace lfm
