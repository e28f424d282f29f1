// Opening a model's tokenizer from disk.
//   folder (or a tokenizer.json inside one): tokenizer.json, then tokenizer_config.json if
//     present, then chat_template.jinja if present (it wins over tokenizer_config's template).
//     Weights are not needed.
//   *.gguf: tokenizer_spec_from_gguf().
#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_spec.h"

namespace lfm {

TokenizerSpec load_tokenizer_spec(const std::string& path);
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace lfm
