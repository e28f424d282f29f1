// Drafts for speculative decoding without a second model (issue 37): prompt lookup. The tokens
// that followed the most recent earlier occurrence of the history's last n tokens are proposed,
// for the longest n in [min_n, max_n] that occurs (as llama.cpp's lookup decoding and vLLM's
// n-gram speculator do). Strong where the output copies its input: code edits, extraction,
// quoting, and models falling into repetition; empty where nothing repeats.
#pragma once

#include <algorithm>
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

// How many tokens to draft next for one request: doubles after a verification that accepted
// every draft, shrinks to what was accepted plus one after one that did not, within [1, max].
// When even single drafts keep failing, it pauses: after the n-th such miss in a row it drafts
// nothing for the next 2^n - 1 decode steps (at most 31), then tries one draft again. So a
// drafter that is always wrong costs one probe in 32 steps, and one that is right drafts the most.
// A costly drafter (a draft model, which must also read every token it did not draft) may give
// up for good after `give_up_after` single-draft misses in a row while fewer than one draft in
// ten has been accepted so far (0: never): a good drafter's bad streak does not end it.
class DraftLength {
 public:
  // Starts at `initial` drafts (0: max).
  explicit DraftLength(int64_t max, int64_t give_up_after = 0, int64_t initial = 0)
      : max_(max < 1 ? 1 : max), k_(initial > 0 ? std::min(initial, max_) : max_), give_up_after_(give_up_after) {}
  // Tokens to draft at this decode step: 0 while paused (the step is counted), else next().
  int64_t take();
  int64_t next() const { return k_; }
  void update(int64_t drafted, int64_t accepted);
  bool given_up() const {
    return give_up_after_ > 0 && misses_ >= give_up_after_ && accepted_total_ * 10 < drafted_total_;
  }

 private:
  static constexpr int64_t kMaxPause = 31;
  int64_t max_, k_;
  int64_t give_up_after_;
  int64_t misses_ = 0;  // single-token drafts rejected in a row
  int64_t drafted_total_ = 0, accepted_total_ = 0;
  int64_t pause_ = 0;   // decode steps left without drafting
};

}  // namespace lfm
