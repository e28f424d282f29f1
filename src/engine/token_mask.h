// Which model output ids a sampler may choose when text is wanted.
#pragma once

#include <cstdint>
#include <vector>

namespace lfm {

class Tokenizer;

// 1 for every id below `vocab` that the tokenizer can decode, 0 elsewhere: a model's output
// layer may be wider than its tokenizer (65536 rows for LFM2's 64400 tokens), and an id with no
// token could never be shown.
std::vector<uint8_t> decodable_token_mask(const Tokenizer& tok, int64_t vocab);

}  // namespace lfm
