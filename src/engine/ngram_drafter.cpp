#include "engine/ngram_drafter.h"

#include <algorithm>

namespace lfm {

std::vector<int32_t> ngram_draft(std::span<const int32_t> history, int64_t k, const NgramDraftOptions& opt) {
  const int64_t len = static_cast<int64_t>(history.size());
  if (k <= 0 || opt.min_n < 1) return {};
  for (int64_t n = std::min<int64_t>(opt.max_n, len - 1); n >= opt.min_n; --n) {
    const std::span<const int32_t> suffix = history.subspan(static_cast<size_t>(len - n));
    // The most recent earlier occurrence (it may overlap the suffix, not be it).
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + start)) continue;
      // What followed it, continued with the same period where it runs into the present: the
      // token at len + i is predicted to be the one at from + i, itself predicted when ≥ len.
      const int64_t from = start + n, period = len - from;
      std::vector<int32_t> out;
      for (int64_t i = 0; i < k; ++i) out.push_back(i < period ? history[from + i] : out[i - period]);
      return out;
    }
  }
  return {};
}

int64_t DraftLength::take() {
  if (given_up()) return 0;
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return k_;
}

void DraftLength::update(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  drafted_total_ += drafted;
  accepted_total_ += accepted;
  if (accepted == 0 && drafted == 1) {
    ++misses_;
    pause_ = std::min<int64_t>((int64_t{1} << std::min<int64_t>(misses_, 5)) - 1, kMaxPause);
  } else if (accepted > 0) {
    misses_ = 0;
  }
  // Full acceptance doubles k (a draft model starting at 2 reaches 8 after two verifications,
  // where one more per step took six); otherwise k becomes what was accepted, plus one.
  k_ = accepted >= drafted ? std::min(max_, k_ * 2) : std::clamp<int64_t>(accepted + 1, 1, max_);
}

}  // namespace lfm
