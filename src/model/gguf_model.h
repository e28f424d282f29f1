// GGUF → the model's neutral inputs: the normalised ModelConfig (from lfm2.* / lfm2moe.* metadata)
// and a TensorSource presenting GGUF tensors under Hugging Face names and PyTorch shapes, so the
// same weight binder and forward pass serve safetensors and GGUF checkpoints.
#pragma once

#include <memory>
#include <string>

#include "formats/gguf_reader.h"
#include "formats/tensor_source.h"
#include "model/config.h"
#include "model/model.h"

namespace lfm::gguf {

// Views into the mapped GGUF (no copies). Stacked expert tensors {d, Fm, E} become E views
// "model.layers.N.feed_forward.experts.E.w1.weight" [Fm, d] — each expert's slice is contiguous.
class GgufTensorSource : public MapTensorSource {
 public:
  explicit GgufTensorSource(std::shared_ptr<const GgufFile> file);
  const GgufFile& file() const { return *file_; }
  void drop_pages(const TensorView& t) const override { file_->drop_pages(t.data, t.nbytes); }
  void detach(const std::vector<std::pair<const void*, size_t>>& keep) const override { file_->detach_from_file(keep); }

 private:
  std::shared_ptr<const GgufFile> file_;
};

// Architectures `lfm2` and `lfm2moe`. Also reads the tokenizer's bos/eos/pad ids. Tied embeddings
// and conv biases are inferred from the tensors present (output.weight, shortconv.*.bias).
ModelConfig config_from_gguf(const GgufFile& f);

}  // namespace lfm::gguf

namespace lfm {
// A GGUF file (architectures lfm2 / lfm2moe) as a Model; its tensors stay memory-mapped.
std::unique_ptr<Model> load_gguf_model(const std::string& path, const LoadOptions& options = {});
}  // namespace lfm
