// The state cache on its own: slots, blocks, reservations, reference counts, the prefix index and
// its LRU eviction, and the byte budget (LFM2-1.2B's 128K context in 1.5 GiB of bf16 KV).
#include <gtest/gtest.h>

#include "cache/state_cache.h"
#include "core/error.h"
#include "model/config.h"
#include "model/state_plan.h"
#include "test_util.h"

namespace lfm {
namespace {

StateShape tiny_shape() {
  StateShape s;
  s.attn_layers = 2;
  s.kv_heads = 1;
  s.head_dim = 4;
  s.conv_layers = 2;
  s.conv_dim = 3;
  s.conv_kernel = 3;
  return s;
}

StateCacheOptions opts(int64_t blocks, int64_t slots, int64_t block_tokens = 4, bool prefix = true) {
  StateCacheOptions o;
  o.block_tokens = block_tokens;
  o.n_blocks = blocks;
  o.n_slots = slots;
  o.prefix_cache = prefix;
  return o;
}

std::vector<int32_t> iota_ids(int32_t from, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

// Runs "a step" without a model: reserve, run, commit.
void feed(StateCache& c, Sequence& s, const std::vector<int32_t>& toks) {
  ASSERT_TRUE(c.reserve(s, static_cast<int64_t>(toks.size())));
  c.run(s, 0, static_cast<int64_t>(toks.size()));
  c.commit(s, toks);
}

TEST(StateCache, SlotsAndBlocksAreCountedAndFreed) {
  StateCache c(tiny_shape(), opts(6, 2));
  Sequence* a = c.open(24);
  Sequence* b = c.open(8);
  EXPECT_FALSE(c.can_open());
  EXPECT_THROW(c.open(8), Error);  // no slot
  feed(c, *a, iota_ids(100, 6));   // 2 blocks
  feed(c, *b, iota_ids(200, 3));   // 1 block
  auto s = c.stats();
  EXPECT_EQ(s.slots_used, 2);
  EXPECT_EQ(s.blocks_used, 3);
  EXPECT_EQ(s.blocks_free, 3);
  EXPECT_EQ(a->n_past(), 6);
  EXPECT_EQ(a->blocks().size(), 2u);
  c.close(a);
  c.close(b);
  s = c.stats();
  EXPECT_EQ(s.slots_used, 0);
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.blocks_cached, 1);  // a's one full block stays in the prefix cache
  EXPECT_EQ(s.blocks_free + s.blocks_cached, 6);
}

TEST(StateCache, ReservationsFailCleanlyAndContextIsEnforced) {
  StateCache c(tiny_shape(), opts(3, 2));
  EXPECT_THROW(c.open(13), Error);  // 13 tokens need 4 blocks, the pool has 3
  Sequence* a = c.open(12);
  Sequence* b = c.open(12);
  EXPECT_TRUE(c.reserve(*a, 8));      // 2 blocks
  EXPECT_FALSE(c.reserve(*b, 8));     // needs 2, 1 left: nothing taken
  EXPECT_EQ(c.stats().blocks_free, 1);
  EXPECT_EQ(b->blocks().size(), 0u);
  EXPECT_TRUE(c.reserve(*b, 4));
  EXPECT_THROW(c.reserve(*a, 13), Error);  // past its context of 12
  try {
    c.reserve(*a, 13);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context size 12"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.run(*b, 0, 5), Error);  // 5 tokens, only 4 reserved
}

TEST(StateCache, FullBlocksAreSharedThroughThePrefixIndex) {
  StateCache c(tiny_shape(), opts(8, 3));
  const auto hist = iota_ids(10, 10);  // blocks [10..13] [14..17], partial [18, 19]
  Sequence* a = c.open(32);
  feed(c, *a, hist);
  // While a is open its full blocks are already shared.
  auto prompt = hist;
  prompt.push_back(99);
  EXPECT_EQ(c.cached_prefix(prompt), 8);
  Sequence* b = c.open(32);
  EXPECT_EQ(c.attach_prefix(*b, prompt), 8);
  EXPECT_EQ(b->n_past(), 8);
  EXPECT_EQ(b->reused_tokens(), 8);
  EXPECT_EQ(b->blocks()[0], a->blocks()[0]);
  EXPECT_EQ(b->blocks()[1], a->blocks()[1]);
  EXPECT_EQ(c.stats().blocks_used, 3);  // two shared + a's partial one
  // A divergent third block is b's own.
  feed(c, *b, {18, 77, 78, 79});
  EXPECT_NE(b->blocks()[2], a->blocks()[2]);
  c.close(a);
  EXPECT_EQ(c.stats().blocks_used, 3);  // b still holds the shared two
  c.close(b);
  EXPECT_EQ(c.stats().blocks_used, 0);
  EXPECT_EQ(c.stats().blocks_cached, 3);  // a's 2 full blocks + b's divergent full one
  EXPECT_EQ(c.stats().prefix_hit_tokens, 8);
  // A prompt that is exactly two blocks reuses one: the last token's logits must be computed.
  EXPECT_EQ(c.cached_prefix(std::vector<int32_t>(hist.begin(), hist.begin() + 8)), 4);
  EXPECT_EQ(c.cached_prefix(iota_ids(11, 9)), 0);  // different first block
  EXPECT_EQ(c.cached_prefix({}), 0);
}

TEST(StateCache, EvictionTakesLeastRecentlyUsedTailsFirst) {
  StateCache c(tiny_shape(), opts(4, 2));
  Sequence* a = c.open(16);
  feed(c, *a, iota_ids(0, 8));  // 2 full blocks
  c.close(a);
  ASSERT_EQ(c.stats().blocks_cached, 2);
  // A new sequence needs 3 blocks: 2 free + 1 evicted, and that must be a's tail block.
  Sequence* b = c.open(16);
  feed(c, *b, iota_ids(500, 12));
  EXPECT_EQ(c.stats().evicted_blocks, 1);
  c.close(b);
  auto probe = iota_ids(0, 9);
  EXPECT_EQ(c.cached_prefix(probe), 4);  // a's head block survived, its tail did not
  c.clear_prefix_cache();
  EXPECT_EQ(c.cached_prefix(probe), 0);
  EXPECT_EQ(c.stats().blocks_free, 4);
}

TEST(StateCache, PrefixCacheOffKeepsNothing) {
  StateCache c(tiny_shape(), opts(4, 1, 4, /*prefix=*/false));
  Sequence* a = c.open(16);
  feed(c, *a, iota_ids(0, 8));
  c.close(a);
  EXPECT_EQ(c.stats().blocks_cached, 0);
  EXPECT_EQ(c.stats().blocks_free, 4);
  Sequence* b = c.open(16);
  EXPECT_EQ(c.attach_prefix(*b, iota_ids(0, 9)), 0);
  EXPECT_EQ(c.conv_pool(0).n_snapshots, 0);
}

TEST(StateCache, RunsCheckpointEveryBlockEnd) {
  StateCache c(tiny_shape(), opts(8, 1));
  Sequence* a = c.open(32);
  ASSERT_TRUE(c.reserve(*a, 10));
  const SeqRun r = c.run(*a, 5, 10);
  EXPECT_EQ(r.row0, 5);
  EXPECT_EQ(r.pos0, 0);
  ASSERT_EQ(r.checkpoints.size(), 2u);  // after positions 3 and 7
  EXPECT_EQ(r.checkpoints[0].pos, 3);
  EXPECT_EQ(r.checkpoints[0].snapshot, a->blocks()[0]);
  EXPECT_EQ(r.checkpoints[1].pos, 7);
  EXPECT_EQ(r.checkpoints[1].snapshot, a->blocks()[1]);
}

// Pad state (a backend that pads decode steps): one slot and one block per pad row beyond the
// options' counts, in the pools the kernels get, counted in the bytes, never given to a sequence,
// never in the statistics.
TEST(StateCache, PadRowsGetTheirOwnSlotAndBlockPastTheSequences) {
  StateCacheOptions o = opts(3, 2);
  const StateBytes plain = state_bytes(tiny_shape(), o);
  o.pad_rows = 2;
  StateCache c(tiny_shape(), o);
  EXPECT_EQ(c.bytes().kv_total, plain.kv_total + 2 * plain.kv_per_block);
  EXPECT_EQ(c.bytes().conv_total, plain.conv_total + 2 * plain.conv_per_slot);
  EXPECT_EQ(c.bytes().snapshots_total, plain.snapshots_total);
  EXPECT_EQ(c.kv_pool(0).n_blocks, 5);
  EXPECT_EQ(c.conv_pool(1).n_slots, 4);
  for (int64_t i = 0; i < 2; ++i) {
    const SeqRun r = c.pad_run(i, 7 + i);
    EXPECT_EQ(r.row0, 7 + i);
    EXPECT_EQ(r.n_rows, 1);
    EXPECT_EQ(r.pos0, 0);
    EXPECT_EQ(r.conv_slot, 2 + i);
    ASSERT_EQ(r.blocks.size(), 1u);
    EXPECT_EQ(r.blocks[0], 3 + i);
    EXPECT_TRUE(r.checkpoints.empty());
  }
  EXPECT_THROW(c.pad_run(2, 0), Error);
  EXPECT_THROW(c.pad_run(-1, 0), Error);
  // Every block and slot the sequences can have are the options' ones.
  Sequence* a = c.open(12);
  Sequence* b = c.open(4);
  feed(c, *a, iota_ids(100, 8));
  feed(c, *b, iota_ids(200, 4));
  EXPECT_FALSE(c.can_open());
  EXPECT_EQ(c.blocks_available(), 0);
  for (Sequence* s : {a, b}) {
    EXPECT_LT(s->conv_slot(), 2);
    for (int32_t blk : s->blocks()) EXPECT_LT(blk, 3);
  }
  const auto s = c.stats();
  EXPECT_EQ(s.blocks_total, 3);
  EXPECT_EQ(s.slots_total, 2);
  EXPECT_EQ(s.blocks_used, 3);
  EXPECT_EQ(StateCache(tiny_shape(), opts(3, 2)).kv_pool(0).n_blocks, 3);  // none without pad rows
}

TEST(StateCache, BadOptionsAreRejected) {
  EXPECT_THROW(StateCache(tiny_shape(), opts(0, 1)), Error);
  EXPECT_THROW(StateCache(tiny_shape(), opts(4, 0)), Error);
  EXPECT_THROW(StateCache(tiny_shape(), opts(4, 1, 0)), Error);
  StateCacheOptions q = opts(4, 1);
  q.type = DType::Q8_0;
  EXPECT_THROW(StateCache(tiny_shape(), q), Error);
  q = opts(4, 1);
  q.pad_rows = -1;
  EXPECT_THROW(StateCache(tiny_shape(), q), Error);
}

TEST(StatePlan, Lfm2_1_2BFullContextFitsInOneAndAHalfGiBOfBf16Kv) {
  const ModelConfig cfg = load_model_config(test::data_dir() + "/assets/lfm2/LFM2-1.2B/config.json");
  EXPECT_EQ(default_state_type(cfg), DType::BF16);
  StatePlanOptions p;
  p.ctx_size = 128 * 1024;
  const StateCacheOptions o = plan_state_cache(cfg, p);
  const StateBytes b = state_bytes(state_shape(cfg), o);
  EXPECT_EQ(b.kv_per_token, 12288u);
  EXPECT_EQ(b.conv_per_slot, 81920u);  // 10 conv layers × 2 rows × 2048 × bf16
  EXPECT_LE(b.kv_total, size_t{3} << 29);  // 1.5 GiB
  EXPECT_EQ(b.snapshots_total, b.conv_per_slot * static_cast<size_t>(o.n_blocks));
  // A memory budget sizes the pool instead, and must hold one full context.
  p.ctx_size = 4096;
  p.memory_bytes = int64_t{1} << 30;
  const StateCacheOptions m = plan_state_cache(cfg, p);
  EXPECT_EQ(m.n_blocks, (int64_t{1} << 30) / static_cast<int64_t>(b.kv_per_block + b.snapshot_per_block));
  // A GPU's pad rows (one KV block each) come out of the same budget.
  p.pad_rows = 15;
  const StateCacheOptions padded = plan_state_cache(cfg, p);
  EXPECT_EQ(padded.n_blocks, ((int64_t{1} << 30) - 15 * static_cast<int64_t>(b.kv_per_block)) /
                                 static_cast<int64_t>(b.kv_per_block + b.snapshot_per_block));
  const StateBytes pb = state_bytes(state_shape(cfg), padded);
  EXPECT_LE(pb.kv_total + pb.snapshots_total, size_t{1} << 30);
  p.pad_rows = 0;
  p.memory_bytes = 1000000;
  EXPECT_THROW(plan_state_cache(cfg, p), Error);
  EXPECT_EQ(parse_byte_size("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(parse_byte_size("512M"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1000"), 1000);
  EXPECT_THROW(parse_byte_size("12 parsecs"), Error);
  EXPECT_THROW(parse_byte_size("-1G"), Error);
  EXPECT_EQ(parse_state_type("auto", DType::F16), DType::F16);
  EXPECT_EQ(parse_state_type("BF16", DType::F32), DType::BF16);
  EXPECT_THROW(parse_state_type("q8_0", DType::F32), Error);
}

}  // namespace
}  // namespace lfm
