// Tokenizer metadata of GGUF files (tokenizer.ggml.*, tokenizer.chat_template) as llama.cpp writes
// it for LFM2: model "gpt2", pre-tokenizer "lfm2", tokens / token_type / merges arrays, special
// token ids, add_bos/add_eos flags and the chat template.
//   token_type: 1 normal, 3 control (added special tokens), 4 user-defined (added non-special).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "formats/gguf_reader.h"
#include "tokenizer/tokenizer_spec.h"

namespace lfm::gguf {

using KeyValues = std::vector<std::pair<std::string, Value>>;

// Every tokenizer.* entry of an existing GGUF (copied when re-converting a GGUF).
KeyValues tokenizer_metadata_from_gguf(const GgufFile& f);

// From a Hugging Face folder's tokenizer.json (+ tokenizer_config.json, chat_template.jinja),
// read by the tokenizer component's loader; empty when the folder has no tokenizer.json. Throws
// when the tokenizer has more tokens than the model's vocab_size (llama.cpp needs one per row).
KeyValues tokenizer_metadata_from_folder(const std::string& dir, int64_t vocab_size);

// tokenizer.* entries describing a TokenizerSpec. vocab_size pads the token list (llama.cpp
// requires one entry per embedding row) with "[PAD<id>]" tokens.
KeyValues tokenizer_metadata_from_spec(const TokenizerSpec& spec, int64_t vocab_size);

// llama.cpp token types.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

}  // namespace lfm::gguf
