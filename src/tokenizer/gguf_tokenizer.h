// Reads the tokenizer.ggml.* metadata of a GGUF file into a TokenizerSpec (same meanings as
// the tokenizer.json reader), through the GGUF reader of formats/.
#pragma once

#include <string>

#include "tokenizer/tokenizer_spec.h"

namespace lfm {

TokenizerSpec tokenizer_spec_from_gguf(const std::string& path);

}  // namespace lfm
