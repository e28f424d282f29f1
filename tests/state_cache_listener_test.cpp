// The state cache's prefix-cache listener (cache/prefix_listener.h), which `lfm serve
// --kv-events` builds its events from: every block that becomes reusable is announced once with
// its chain parent and tokens, every indexed block that leaves is announced removed, a flush is
// one all_cleared; the announcements always add up to what the cache can hand out.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "cache/state_cache.h"

namespace lfm {
namespace {

StateShape shape() {
  StateShape s;
  s.attn_layers = 1;
  s.kv_heads = 1;
  s.head_dim = 2;
  s.conv_layers = 1;
  s.conv_dim = 2;
  s.conv_kernel = 3;
  return s;
}

StateCacheOptions opts(int64_t blocks, int64_t slots, int64_t draft = 0) {
  StateCacheOptions o;
  o.block_tokens = 4;
  o.n_blocks = blocks;
  o.n_slots = slots;
  o.draft_tokens = draft;
  return o;
}

std::vector<int32_t> ids(int32_t from, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

struct Recorder : PrefixCacheListener {
  struct Stored {
    uint64_t hash, parent;
    std::vector<int32_t> prefix;
  };
  std::vector<Stored> stored;
  std::vector<uint64_t> removed;
  int cleared = 0;
  std::map<uint64_t, int> live;  // announced and not removed, by hash (count: must stay 0 or 1)
  void block_stored(uint64_t h, uint64_t p, std::span<const int32_t> prefix) override {
    stored.push_back({h, p, {prefix.begin(), prefix.end()}});
    ++live[h];
  }
  void block_removed(uint64_t h) override {
    removed.push_back(h);
    if (--live[h] == 0) live.erase(h);
  }
  void all_cleared() override {
    ++cleared;
    live.clear();
  }
};

void feed(StateCache& c, Sequence& s, const std::vector<int32_t>& t) {
  ASSERT_TRUE(c.reserve(s, static_cast<int64_t>(t.size())));
  c.run(s, 0, static_cast<int64_t>(t.size()));
  c.commit(s, t);
}

// Blocks the cache can hand out now: for each announced chain, a lookup of its prefix finds it.
int64_t reusable_blocks(const StateCache& c, const Recorder& r) {
  int64_t n = 0;
  for (const auto& s : r.stored) {
    if (!r.live.count(s.hash)) continue;
    std::vector<int32_t> probe = s.prefix;
    probe.push_back(0);  // cached_prefix leaves one token to compute
    if (c.cached_prefix(probe) == static_cast<int64_t>(s.prefix.size())) ++n;
  }
  return n;
}

TEST(StateCacheListener, EveryStoredBlockIsAnnouncedOnceWithItsChain) {
  StateCache c(shape(), opts(16, 2));
  Recorder r;
  c.set_listener(&r);
  Sequence* a = c.open(32);
  feed(c, *a, ids(10, 3));  // no full block yet
  EXPECT_TRUE(r.stored.empty());
  feed(c, *a, ids(13, 7));  // 10 tokens: blocks 0 and 1 full
  ASSERT_EQ(r.stored.size(), 2u);
  EXPECT_EQ(r.stored[0].parent, 0u);
  EXPECT_EQ(r.stored[0].prefix, ids(10, 4));
  EXPECT_EQ(r.stored[0].hash, block_chain_hash(0, std::vector<int32_t>(ids(10, 4))));
  EXPECT_EQ(r.stored[1].parent, r.stored[0].hash);
  EXPECT_EQ(r.stored[1].prefix, ids(10, 8));
  EXPECT_EQ(r.stored[1].hash, block_chain_hash(r.stored[0].hash, std::vector<int32_t>(ids(14, 4))));
  c.close(a);
  EXPECT_TRUE(r.removed.empty());  // closing keeps the blocks cached

  // A sequence resuming from the cached prefix announces only the blocks it adds.
  Sequence* b = c.open(32);
  std::vector<int32_t> prompt = ids(10, 8);
  prompt.push_back(99);
  EXPECT_EQ(c.attach_prefix(*b, prompt), 8);
  feed(c, *b, ids(99, 4));  // block 2 full
  ASSERT_EQ(r.stored.size(), 3u);
  EXPECT_EQ(r.stored[2].parent, r.stored[1].hash);
  EXPECT_EQ(r.stored[2].prefix.size(), 12u);

  // A second sequence computing the same blocks while they are cached adds nothing to the index.
  Sequence* d = c.open(32);
  std::vector<int32_t> same = ids(10, 8);
  for (int32_t t : ids(99, 4)) same.push_back(t);
  feed(c, *d, same);
  EXPECT_EQ(r.stored.size(), 3u);
  c.close(b);
  c.close(d);
  for (const auto& [h, n] : r.live) EXPECT_EQ(n, 1) << h;
  EXPECT_EQ(reusable_blocks(c, r), 3);
  EXPECT_EQ(static_cast<int64_t>(r.live.size()), c.stats().blocks_cached);
}

TEST(StateCacheListener, EvictionsAreAnnouncedAndTheAnnouncementsMatchTheCache) {
  StateCache c(shape(), opts(6, 1));
  Recorder r;
  c.set_listener(&r);
  for (int round = 0; round < 5; ++round) {  // each prompt fills 4 blocks of a 6-block pool
    Sequence* s = c.open(16);
    feed(c, *s, ids(1000 * (round + 1), 16));
    c.close(s);
    EXPECT_EQ(static_cast<int64_t>(r.live.size()), c.stats().blocks_cached) << "round " << round;
    EXPECT_EQ(reusable_blocks(c, r), c.stats().blocks_cached) << "round " << round;
  }
  EXPECT_EQ(r.stored.size(), 20u);
  EXPECT_EQ(static_cast<int64_t>(r.removed.size()), c.stats().evicted_blocks);
  EXPECT_EQ(r.removed.size(), 20u - 6u);
  std::set<uint64_t> once(r.removed.begin(), r.removed.end());
  EXPECT_EQ(once.size(), r.removed.size());  // no block announced removed twice
  for (uint64_t h : r.removed) EXPECT_FALSE(r.live.count(h));
  // A prompt's tail blocks go before its head (the LRU order): the last round's head survives.
  EXPECT_EQ(r.removed.front(), r.stored[3].hash);
}

TEST(StateCacheListener, ClearAnnouncesRemovalsAndFlushForgetsEverything) {
  StateCache c(shape(), opts(16, 2));
  Recorder r;
  c.set_listener(&r);
  Sequence* a = c.open(16);
  feed(c, *a, ids(1, 8));
  c.close(a);
  Sequence* held = c.open(16);
  feed(c, *held, ids(50, 8));  // two indexed blocks a running sequence holds
  c.clear_prefix_cache();      // only unused blocks go, each announced
  EXPECT_EQ(r.removed.size(), 2u);
  EXPECT_EQ(r.cleared, 0);
  EXPECT_EQ(r.live.size(), 2u);

  c.flush_prefix_cache();
  EXPECT_EQ(r.cleared, 1);
  EXPECT_EQ(r.removed.size(), 2u);  // no per-block removals for a flush
  // Nothing is reusable any more, the held blocks included; they are freed, not cached, on release.
  std::vector<int32_t> probe = ids(50, 8);
  probe.push_back(0);
  EXPECT_EQ(c.cached_prefix(probe), 0);
  c.close(held);
  EXPECT_EQ(c.stats().blocks_cached, 0);
  EXPECT_EQ(c.stats().blocks_free, 16);
  // The cache fills again and announces again, blocks of the same tokens included.
  Sequence* b = c.open(16);
  feed(c, *b, ids(50, 8));
  EXPECT_EQ(r.stored.size(), 6u);
  EXPECT_EQ(r.stored[4].prefix, ids(50, 4));
  c.close(b);
}

TEST(StateCacheListener, SpeculativeTokensAreAnnouncedOnlyOnceKept) {
  StateCache c(shape(), opts(16, 1, /*draft=*/4));
  Recorder r;
  c.set_listener(&r);
  Sequence* s = c.open(32);
  feed(c, *s, ids(1, 3));
  // A verification step of 5 tokens (positions 3..7) crosses block ends 3 and 7.
  ASSERT_TRUE(c.reserve(*s, 5));
  c.run(*s, 0, 5, /*speculative=*/true);
  c.commit(*s, ids(4, 5));
  EXPECT_TRUE(r.stored.empty());  // all of it is tentative
  c.commit_accepted(*s, 2);       // keeps positions 3 and 4: block 0 (0..3) is full and kept
  ASSERT_EQ(r.stored.size(), 1u);
  EXPECT_EQ(r.stored[0].prefix, ids(1, 4));
  c.close(s);
}

}  // namespace
}  // namespace lfm
