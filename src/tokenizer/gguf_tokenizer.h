// Reads the tokenizer.ggml.* metadata of a GGUF file into a TokenizerSpec (same meanings as
// the tokenizer.json reader). Implemented by the GGUF component.
#pragma once

#include <string>

#include "tokenizer/tokenizer_spec.h"

namespace lfm {

TokenizerSpec tokenizer_spec_from_gguf(const std::string& path);

}  // namespace lfm
