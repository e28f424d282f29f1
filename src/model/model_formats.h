// Format hooks used by load_model: the GGUF reader provides these.
#pragma once

#include <memory>
#include <string>

namespace lfm {

class Model;

bool is_gguf_path(const std::string& path);
std::unique_ptr<Model> load_gguf_model(const std::string& path);

}  // namespace lfm
