#include "tokenizer/load_tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "formats/gguf_reader.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace lfm {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) { return read_text_file(p.string(), "tokenizer:"); }

}  // namespace

TokenizerSpec load_tokenizer_spec(const std::string& path) {
  if (is_gguf_path(path)) return tokenizer_spec_from_gguf(path);
  fs::path dir(path);
  if (fs::is_regular_file(dir) && dir.filename() == "tokenizer.json") dir = dir.parent_path();
  LFM_CHECK(fs::is_directory(dir), "tokenizer: '", path, "' is neither a model folder nor a .gguf file");
  const fs::path json_path = dir / "tokenizer.json";
  LFM_CHECK(fs::exists(json_path), "tokenizer: no tokenizer.json in '", dir.string(), "'");
  TokenizerSpec spec;
  try {
    spec = parse_tokenizer_json_text(read_file(json_path));
    const fs::path config_path = dir / "tokenizer_config.json";
    if (fs::exists(config_path)) {
      const std::string text = read_file(config_path);
      check_json_depth(text, "tokenizer_config.json");
      nlohmann::json config;
      try {
        config = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {  // syntax, or a number beyond double
        fail("tokenizer_config.json: invalid JSON: ", e.what());
      }
      apply_tokenizer_config(spec, config);
    }
  } catch (const Error& e) {
    fail(e.what(), " [in ", dir.string(), "]");
  }
  const fs::path template_path = dir / "chat_template.jinja";
  if (fs::exists(template_path)) spec.chat_template = read_file(template_path);
  return spec;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  return std::make_unique<Tokenizer>(load_tokenizer_spec(path));
}

}  // namespace lfm
