// What `lfm info` shows about a GGUF file: format version, alignment, every metadata entry
// (arrays abbreviated), and the tensor type mix with element and byte counts.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lfm::gguf {

nlohmann::json gguf_summary_json(const std::string& path);
std::string gguf_summary_text(const std::string& path);

}  // namespace lfm::gguf
