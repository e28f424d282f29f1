#include "tokenizer/streaming_detokenizer.h"

#include <algorithm>

#include "core/utf8.h"

namespace lfm {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamingDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id) && std::find(keep_.begin(), keep_.end(), id) == keep_.end()) return {};
  tokenizer_.append_token_bytes(id, pending_);
  // Everything before a still-incomplete trailing sequence is final: lossy decoding of a byte
  // string never looks past the sequence it is in, so emitting it now gives the same text as
  // decoding everything at once.
  const size_t hold = incomplete_utf8_tail(pending_);
  std::string ready = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamingDetokenizer::finish() {
  std::string rest = utf8_lossy(pending_);
  pending_.clear();
  return rest;
}

}  // namespace lfm
