// Incremental decoding for generation: feed ids one at a time and get text pieces that are
// always valid UTF-8. Bytes of a character split across tokens are held back until it is
// complete, so the concatenation of all pieces (including finish()) equals
// Tokenizer::decode(all ids, skip_special).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lfm {

class StreamingDetokenizer {
 public:
  // The tokenizer must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);
  // Ids shown even when skip_special drops special tokens (markers an output parser needs).
  void keep(std::vector<int32_t> ids) { keep_ = std::move(ids); }

  // Returns the text that became complete with this token (often empty for partial characters).
  std::string push(int32_t id);

  // Flushes held-back bytes at the end of the stream (an unfinished character becomes U+FFFD, as
  // in one-shot decoding) and resets for a new stream.
  std::string finish();

  // Number of bytes held back waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> keep_;
  std::string pending_;
};

}  // namespace lfm
