#include "engine/token_mask.h"

#include "tokenizer/tokenizer.h"

namespace lfm {

std::vector<uint8_t> decodable_token_mask(const Tokenizer& tok, int64_t vocab) {
  std::vector<uint8_t> ok(static_cast<size_t>(vocab), 0);
  const auto& spec = tok.spec();
  for (int64_t i = 0; i < vocab && i < static_cast<int64_t>(spec.vocab.size()); ++i) ok[i] = !spec.vocab[i].empty();
  for (const auto& a : spec.added_tokens)
    if (a.id >= 0 && a.id < vocab) ok[a.id] = 1;
  return ok;
}

}  // namespace lfm
