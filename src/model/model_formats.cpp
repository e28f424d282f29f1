// Placeholder-free default: until the GGUF reader is linked in (src/gguf), a .gguf path is a
// clear error. The GGUF component replaces this file's definitions.
#include "model/model_formats.h"

#include "core/error.h"
#include "model/model.h"

namespace lfm {

bool is_gguf_path(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

std::unique_ptr<Model> load_gguf_model(const std::string& path) {
  fail("model: GGUF files are not supported by this build ('", path, "')");
}

}  // namespace lfm
