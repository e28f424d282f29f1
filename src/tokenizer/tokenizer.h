// Byte-level BPE tokenizer with Hugging Face `tokenizers` semantics, built from a TokenizerSpec
// (read from tokenizer.json or GGUF). Encoding pipeline:
//   validate UTF-8 → split out added tokens (non-normalized first, then normalized ones)
//   → regex pre-tokenizer (Split, Isolated) → byte-level BPE → BOS/EOS post-processing.
// All const methods are safe to call from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace lfm {

namespace tok {
class AddedTokenMatcher;
class BpeModel;
class RegexSplitter;
}  // namespace tok

class Tokenizer {
 public:
  // Throws lfm::Error on an inconsistent spec (bad regex, merges naming unknown tokens, …).
  explicit Tokenizer(TokenizerSpec spec);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text (must be valid UTF-8, else lfm::Error naming the byte offset) → ids. add_special
  // applies the post-processor (LFM2: prepend <|startoftext|>).
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const;

  // Ids → text. Ill-formed byte sequences (e.g. half of a character) become U+FFFD, like HF.
  // skip_special drops tokens marked special (not e.g. LFM2.5's <|tool_call_start|>).
  // Throws lfm::Error on an id outside [0, vocab_size()) or with no token.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes one token contributes to decode() output (possibly an incomplete UTF-8 sequence).
  void append_token_bytes(int32_t id, std::string& out) const;

  // The regex pre-tokenizer alone (no added tokens, no BPE): the pieces of `text`.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // Token text in vocabulary form ("Ġworld", "<|im_end|>"); lfm::Error for unknown ids.
  const std::string& id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(spec_.vocab.size()); }
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int32_t pad_id() const { return spec_.pad_id; }
  const std::string& bos_token() const { return spec_.bos_token; }
  const std::string& eos_token() const { return spec_.eos_token; }
  const std::string& pad_token() const { return spec_.pad_token; }
  bool adds_bos() const { return spec_.add_bos; }
  const std::string& chat_template() const { return spec_.chat_template; }
  const TokenizerSpec& spec() const { return spec_; }

 private:
  void encode_plain_text(std::string_view text, std::vector<int32_t>& out) const;
  void check_id(int32_t id) const;

  TokenizerSpec spec_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lfm
