// Prompt-lookup drafting (issue 37) and the adaptive draft length.
#include <gtest/gtest.h>

#include "engine/ngram_drafter.h"

namespace lfm {
namespace {

using Ids = std::vector<int32_t>;

TEST(NgramDraft, ProposesWhatFollowedTheLongestMostRecentMatch) {
  // The last three tokens occurred at the start: what followed them, then the same again.
  EXPECT_EQ(ngram_draft(Ids{1, 2, 3, 4, 9, 1, 2, 3}, 5), (Ids{4, 9, 1, 2, 3}));
  EXPECT_EQ(ngram_draft(Ids{1, 2, 3, 4, 9, 1, 2, 3}, 2), (Ids{4, 9}));
  // "6 7" (n = 2) wins over the more recent "7" (n = 1).
  EXPECT_EQ(ngram_draft(Ids{5, 6, 7, 9, 7, 1, 6, 7}, 3), (Ids{9, 7, 1}));
  EXPECT_EQ(ngram_draft(Ids{5, 6, 7, 9, 7, 1, 6, 7}, 3, {.min_n = 1, .max_n = 1}), (Ids{1, 6, 7}));
  // Of two earlier occurrences, the most recent.
  EXPECT_EQ(ngram_draft(Ids{4, 8, 4, 5, 0, 4}, 1, {.min_n = 1, .max_n = 1}), (Ids{5}));
}

TEST(NgramDraft, RepetitionContinuesWithItsPeriod) {
  EXPECT_EQ(ngram_draft(Ids{1, 2, 1, 2, 1, 2}, 5), (Ids{1, 2, 1, 2, 1}));
  EXPECT_EQ(ngram_draft(Ids{7, 7, 7}, 4), (Ids{7, 7, 7, 7}));
  EXPECT_EQ(ngram_draft(Ids{3, 1, 2, 3, 1, 2, 3}, 4), (Ids{1, 2, 3, 1}));
}

TEST(NgramDraft, NothingToProposeIsEmpty) {
  EXPECT_TRUE(ngram_draft(Ids{1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(ngram_draft(Ids{}, 4).empty());
  EXPECT_TRUE(ngram_draft(Ids{5}, 4).empty());
  EXPECT_TRUE(ngram_draft(Ids{5, 5}, 0).empty());
  EXPECT_TRUE(ngram_draft(Ids{1, 2, 1, 2}, 3, {.min_n = 3, .max_n = 3}).empty());  // "1 2" is too short
}

TEST(DraftLength, GrowsOnFullAcceptanceAndBacksOffToWhatWasAccepted) {
  DraftLength k(6);
  EXPECT_EQ(k.next(), 6);
  k.update(6, 6);
  EXPECT_EQ(k.next(), 6);  // capped
  k.update(6, 2);
  EXPECT_EQ(k.next(), 3);
  k.update(3, 0);
  EXPECT_EQ(k.next(), 1);  // an always-wrong drafter drafts one token per step
  k.update(1, 1);
  EXPECT_EQ(k.next(), 2);
  k.update(0, 0);  // nothing drafted: unchanged
  EXPECT_EQ(k.next(), 2);
  EXPECT_EQ(DraftLength(0).next(), 1);
  // Growth doubles: a draft model starting at 2 is at 8 after two full acceptances.
  DraftLength m(8, 3, 2);
  EXPECT_EQ(m.next(), 2);
  m.update(2, 2);
  EXPECT_EQ(m.next(), 4);
  m.update(4, 4);
  EXPECT_EQ(m.next(), 8);
  m.update(8, 3);
  EXPECT_EQ(m.next(), 4);
}

// A drafter whose single drafts keep failing is paused for 1, 3, 7, 15, 31, 31, ... steps between
// probes: about one probe in 32 steps once it has shown it is always wrong; an accepted draft
// ends the pauses.
TEST(DraftLength, AnAlwaysWrongDrafterPausesLongerAndLonger) {
  DraftLength k(4);
  std::vector<int64_t> gaps;
  int64_t gap = 0, probes = 0;
  for (int step = 0; step < 400; ++step) {
    const int64_t n = k.take();
    if (n == 0) {
      ++gap;
      continue;
    }
    if (probes++ > 0) gaps.push_back(gap);
    gap = 0;
    k.update(n, 0);
  }
  // The first rounds shrink k from 4 to 1 (no pause), then the single-draft misses pause.
  ASSERT_GE(gaps.size(), 8u);
  EXPECT_EQ(std::vector<int64_t>(gaps.begin(), gaps.begin() + 8), (std::vector<int64_t>{0, 1, 3, 7, 15, 31, 31, 31}));
  EXPECT_EQ(gaps.back(), 31);
  EXPECT_LT(probes, 400 / 20);
  while (k.take() == 0) {
  }
  k.update(1, 1);  // a hit on the next probe ends it
  EXPECT_EQ(k.take(), 2);
  k.update(2, 0);
  EXPECT_EQ(k.take(), 1);
  k.update(1, 0);
  EXPECT_EQ(k.take(), 0);  // one step of pause after the first miss again
  EXPECT_EQ(k.take(), 1);
  EXPECT_FALSE(k.given_up());
}

TEST(DraftLength, ACostlyDrafterGivesUpAfterItsMisses) {
  DraftLength k(1, /*give_up_after=*/3);
  int probes = 0;
  for (int step = 0; step < 1000; ++step)
    if (const int64_t n = k.take(); n > 0) {
      ++probes;
      k.update(n, 0);
    }
  EXPECT_EQ(probes, 3);
  EXPECT_TRUE(k.given_up());
  // One that has been right often does not give up on a bad streak.
  DraftLength good(4, 3);
  good.update(4, 4);
  good.update(4, 4);
  for (int i = 0; i < 10; ++i) {
    while (good.take() == 0) {
    }
    good.update(good.next(), 0);
  }
  EXPECT_FALSE(good.given_up());
}

}  // namespace
}  // namespace lfm
