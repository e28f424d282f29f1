// Tokenizer metadata of GGUF files (tokenizer.ggml.*, tokenizer.chat_template) as llama.cpp writes
// it for LFM2: model "gpt2", pre-tokenizer "lfm2", tokens / token_type / merges arrays, special
// token ids, add_bos/add_eos flags and the chat template.
//   token_type: 1 normal, 3 control (added special tokens), 4 user-defined (added non-special).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer_spec.h"

namespace lfm::gguf {

using KeyValues = std::vector<std::pair<std::string, Value>>;

// Every tokenizer.* entry of an existing GGUF (copied when re-converting a GGUF).
KeyValues tokenizer_metadata_from_gguf(const GgufFile& f);

// tokenizer.* entries describing a TokenizerSpec. vocab_size pads the token list (llama.cpp
// requires one entry per embedding row) with "[PAD<id>]" tokens.
KeyValues tokenizer_metadata_from_spec(const TokenizerSpec& spec, int64_t vocab_size);

// llama.cpp token types.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

}  // namespace lfm::gguf
