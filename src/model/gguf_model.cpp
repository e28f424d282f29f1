#include "model/gguf_model.h"

#include "core/error.h"
#include "model/model.h"

namespace lfm {

// Opens a GGUF checkpoint: its metadata as the config, its tensors under HF names.
std::unique_ptr<Model> load_gguf_model(const std::string& path, const LoadOptions& options) {
  auto file = std::make_shared<const gguf::GgufFile>(path);
  ModelConfig cfg = gguf::config_from_gguf(*file);
  return std::make_unique<Model>(std::move(cfg), std::make_unique<gguf::GgufTensorSource>(file), options);
}

}  // namespace lfm
