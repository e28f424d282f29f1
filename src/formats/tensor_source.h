// Where weights come from: a set of named tensors with Hugging Face names and PyTorch shapes.
// Safetensors checkpoints provide them directly; the GGUF reader presents its tensors under the
// same names and shapes, so one weight loader serves both formats.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace lfm {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // nullptr when absent.
  virtual const TensorView* find(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Human-readable origin for error messages ("model.safetensors", "x.gguf").
  virtual std::string origin() const = 0;
  // The bytes of t will rarely be read again (a packed copy serves the kernels): a file-backed
  // source may return their pages to the OS; they stay readable (faulted in again from the file).
  virtual void drop_pages(const TensorView& t) const { (void)t; }
  // Lets go of the files behind the views (MappedFile::detach_from_file): the bytes of the
  // `keep` ranges stay readable where they are, every other tensor byte reads as zero from now on.
  // A source that owns its bytes in memory has nothing to let go of.
  virtual void detach(const std::vector<std::pair<const void*, size_t>>& keep) const { (void)keep; }
};

// A TensorSource backed by a name → view map; owners keep the bytes alive.
class MapTensorSource : public TensorSource {
 public:
  const TensorView* find(const std::string& name) const override {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [k, v] : tensors_) out.push_back(k);
    return out;
  }
  std::string origin() const override { return origin_; }

 protected:
  std::map<std::string, TensorView> tensors_;
  std::string origin_;
};

}  // namespace lfm
