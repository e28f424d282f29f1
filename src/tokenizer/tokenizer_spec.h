// A format-neutral description of a byte-level BPE tokenizer. Filled from a Hugging Face
// tokenizer.json (+ tokenizer_config.json) or from GGUF metadata (tokenizer.ggml.*), then
// handed to the Tokenizer. Both sources must produce identical behaviour.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lfm {

struct AddedToken {
  int32_t id = -1;
  std::string content;     // literal text, matched before BPE
  bool special = true;     // skipped by decode(skip_special = true)
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

struct TokenizerSpec {
  std::vector<std::string> vocab;  // id → token in byte-level form ("Ġworld"); size = vocab size
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order (0 = first merge)
  std::vector<AddedToken> added_tokens;
  std::string pretokenizer_regex;  // the Split pattern applied before ByteLevel (UTF-8, PCRE syntax)
  bool ignore_merges = true;       // a pre-token that is itself in the vocab is emitted whole
  bool add_bos = true;             // the post-processor prepends bos_id
  bool add_eos = false;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  std::string bos_token, eos_token, pad_token;  // texts, for chat templates
  std::string chat_template;                    // Jinja source; empty when none is shipped
};

}  // namespace lfm
