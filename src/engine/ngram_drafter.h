// Drafts for speculative decoding without a second model (issue 37): prompt lookup. The tokens
// that followed the most recent earlier occurrence of the history's last n tokens are proposed,
// for the longest n in [min_n, max_n] that occurs (as llama.cpp's lookup decoding and vLLM's
// n-gram speculator do). Strong where the output copies its input: code edits, extraction,
// quoting, and models falling into repetition; empty where nothing repeats.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lfm {

struct NgramDraftOptions {
  int min_n = 1;  // shortest suffix that may match
  int max_n = 3;  // longest suffix tried first
};

// At most k tokens continuing `history` (prompt and output so far); empty when its last min_n
// tokens never occurred before.
std::vector<int32_t> ngram_draft(std::span<const int32_t> history, int64_t k, const NgramDraftOptions& opt = {});

// How many tokens to draft next for one request: grows by one after a verification that accepted
// every draft, shrinks to what was accepted plus one after one that did not, within [1, max], so
// a drafter that is always wrong costs one drafted token per step and one that is right drafts
// the most.
class DraftLength {
 public:
  explicit DraftLength(int64_t max) : max_(max < 1 ? 1 : max), k_(max_) {}
  int64_t next() const { return k_; }
  void update(int64_t drafted, int64_t accepted);

 private:
  int64_t max_, k_;
};

}  // namespace lfm
