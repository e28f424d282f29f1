// The state of every sequence a model is running, in pools preallocated once:
//   * per attention layer, a pool of fixed-size KV blocks (a sequence holds a block table);
//   * per conv layer, a pool of rolling-state slots [slots, K-1, d] (a sequence holds one slot);
//   * with the prefix cache on, one conv-state snapshot per KV block, taken when the block fills.
// Nothing grows by copying. A Sequence is a small handle (block table, conv slot, tokens held).
//
// Prefix cache. A full block is indexed by a hash chain over its tokens and every token before
// it, so equal hashes mean equal prefixes (the tokens are compared too, so a hash collision can
// only miss, never alias). Blocks are reference-counted: a full block can be shared by several
// sequences (it is never written again), and when its last user closes it stays cached until
// free blocks run out, then the least recently used cached blocks are evicted (the tail blocks of
// a sequence before its head). The conv state is recurrent, so resuming after a cached prefix also
// needs the conv state at that point: the snapshot taken when the prefix's last block filled. A new
// sequence thus resumes from its longest cached prefix of whole blocks, recomputing the rest.
//
// Speculative steps (speculative decoding). Steps may feed a sequence tokens of which only a
// prefix turns out to be kept: a verification step (the last sampled token and k drafts), or a
// draft model's chain of one-token steps. The first speculative step opens a chain (after any
// leading tokens it marks as sure); with `draft_tokens` = k the chain may grow to k + 1 tokens
// over one or more steps, and the conv state after each of its first k positions is snapshotted
// (k snapshots per slot, beside the prefix cache's). `commit_accepted` then keeps a prefix of
// the chain: the KV past it is simply never read (positions past n_past), the conv state is
// restored from the snapshot at the last kept position, and only kept tokens ever reach the
// prefix cache. Nothing kept is recomputed.
//
// Not thread-safe: one owner (the engine's scheduler thread, or a test) drives it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/prefix_listener.h"
#include "core/dtype.h"
#include "kernels/device_memory.h"
#include "kernels/state_pools.h"

namespace lfm {

// Sizes of the state a model keeps per sequence (the model layer fills it from its config).
struct StateShape {
  int64_t attn_layers = 0, kv_heads = 0, head_dim = 0;
  int64_t conv_layers = 0, conv_dim = 0, conv_kernel = 0;
};

struct StateCacheOptions {
  int64_t block_tokens = 16;   // positions per KV block
  DType type = DType::F32;     // storage of K, V and conv states: F32, F16 or BF16
  int64_t n_blocks = 0;        // KV blocks (each spans every attention layer)
  int64_t n_slots = 1;         // conv-state slots: sequences open at once
  bool prefix_cache = true;    // index full blocks and keep a conv snapshot per block
  int64_t draft_tokens = 0;    // k: speculative steps of up to k + 1 tokens (k snapshots per slot)
  // Conv slots and KV blocks that no sequence holds, one of each per pad row a padded decode step
  // may have (Backend::decode_step_rows): pad row i runs on the i-th, at position 0, and what it
  // leaves there is never read.
  int64_t pad_rows = 0;
};

struct StateCacheStats {
  int64_t blocks_total = 0, blocks_used = 0, blocks_cached = 0, blocks_free = 0;
  int64_t slots_total = 0, slots_used = 0;
  int64_t prefix_lookup_tokens = 0;  // tokens of the prompts looked up
  int64_t prefix_hit_tokens = 0;     // tokens reused from the cache
  int64_t evicted_blocks = 0;
};

// Bytes of the pools: KV per block, conv state per slot, snapshot per block; the speculative
// snapshots (draft_tokens per slot) are counted in spec_total.
struct StateBytes {
  size_t kv_per_token = 0, kv_per_block = 0, conv_per_slot = 0, snapshot_per_block = 0;
  size_t kv_total = 0, conv_total = 0, snapshots_total = 0, spec_total = 0;
  size_t total() const { return kv_total + conv_total + snapshots_total + spec_total; }
};
StateBytes state_bytes(const StateShape& shape, const StateCacheOptions& opt);

class StateCache;

// One sequence's handle. Valid from StateCache::open until close.
class Sequence {
 public:
  int64_t n_past() const { return static_cast<int64_t>(tokens_.size()); }  // tokens in its state
  int64_t max_tokens() const { return max_tokens_; }                        // its context size
  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<const int32_t> blocks() const { return blocks_; }
  int32_t conv_slot() const { return slot_; }
  int64_t reused_tokens() const { return reused_; }  // tokens taken from the prefix cache
  // Tokens of the open speculative chain (fed, not yet kept or dropped by commit_accepted).
  int64_t speculative_tokens() const { return spec_base_ < 0 ? 0 : n_past() - spec_base_; }

 private:
  friend class StateCache;
  int32_t slot_ = -1;
  int64_t max_tokens_ = 0;
  int64_t reused_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> blocks_;             // block table, covering at least n_past positions
  std::vector<uint64_t> block_hash_;        // chain hash of each full block (set at commit)
  std::vector<ConvCheckpoint> checkpoints_;  // of the current step
  int64_t spec_base_ = -1;                   // first position of the open speculative chain, -1: none
};

class StateCache {
 public:
  // The pools live in `memory` (a backend's: device memory for a GPU backend); every byte of
  // them is moved through it (zeroing a slot, restoring a snapshot), never by host code.
  StateCache(const StateShape& shape, const StateCacheOptions& opt, DeviceMemory& memory = host_memory());
  ~StateCache();
  StateCache(const StateCache&) = delete;
  StateCache& operator=(const StateCache&) = delete;

  const StateShape& shape() const { return shape_; }
  const StateCacheOptions& options() const { return opt_; }
  StateBytes bytes() const { return state_bytes(shape_, opt_); }
  StateCacheStats stats() const;

  // ---- sequences ----
  bool can_open() const { return !free_slots_.empty(); }
  // A new, empty sequence of at most max_tokens tokens (zeroed conv state). Throws when no slot
  // is free or when max_tokens needs more blocks than the whole pool holds.
  Sequence* open(int64_t max_tokens);
  // Releases its blocks (full ones stay in the prefix cache) and its slot. Null is fine.
  void close(Sequence* seq);
  // Empties the sequence (as if just opened), keeping its slot.
  void reset(Sequence& seq);

  // ---- prefix cache ----
  // Leading tokens of `tokens` that a new sequence would take from the cache: whole cached blocks,
  // leaving at least one token to compute (the last one's logits are needed).
  int64_t cached_prefix(std::span<const int32_t> tokens) const;
  // On an empty sequence: shares the cached blocks of that prefix and restores the conv state
  // saved at its end. Returns the tokens reused (also counted in stats).
  int64_t attach_prefix(Sequence& seq, std::span<const int32_t> tokens);
  // Forgets every cached block that no sequence uses (each one announced as removed).
  void clear_prefix_cache();
  // Forgets every block of the prefix cache, also those open sequences hold (they stay theirs,
  // no longer reusable, and go to the free pool when released): the cache is empty after it, and
  // the listener hears all_cleared once.
  void flush_prefix_cache();
  // Tells `listener` (null: nobody) about the prefix cache's changes from now on; it must outlive
  // the cache or be replaced first.
  void set_listener(PrefixCacheListener* listener) { listener_ = listener; }

  // ---- one step ----
  // Blocks a sequence still needs to hold n more tokens, and blocks that can be had now (free or
  // evictable from the prefix cache).
  int64_t blocks_needed(const Sequence& seq, int64_t n) const;
  int64_t blocks_available() const { return static_cast<int64_t>(free_blocks_.size() + lru_.size()); }
  // Makes room for n more tokens. Throws past the sequence's context size; returns false, changing
  // nothing, when the pool has too few blocks.
  bool reserve(Sequence& seq, int64_t n);
  // The sequence's run for a step of n new tokens starting at packed row row0 (after reserve),
  // with a conv checkpoint at every block end it crosses. When `speculative`, the tokens after
  // the first `sure` open a chain (or continue the open one) and the conv state after each chain
  // position below draft_tokens is snapshotted; the chain may reach draft_tokens + 1 tokens.
  // Valid until its next run().
  SeqRun run(Sequence& seq, int64_t row0, int64_t n, bool speculative = false, int64_t sure = 0);
  // After the step: the sequence now holds `tokens` more (tentatively, in an open chain); newly
  // full blocks before any chain enter the prefix cache.
  void commit(Sequence& seq, std::span<const int32_t> tokens);
  // Ends the open chain keeping its first n_keep tokens (1 ≤ n_keep ≤ its length), as if only
  // they had been fed: the conv state is restored from the snapshot after the last of them.
  void commit_accepted(Sequence& seq, int64_t n_keep);

  // ---- pools, for the kernels ----
  KvPool kv_pool(int64_t attn_layer) const;
  ConvPool conv_pool(int64_t conv_layer) const;
  // Pad row i's run (i < pad_rows): one token at packed row row0, at position 0 of the i-th pad
  // block, with the i-th pad slot. No sequence's state is touched.
  SeqRun pad_run(int64_t i, int64_t row0) const;

 private:
  struct Block {
    int32_t refs = 0;
    bool indexed = false;
    uint64_t hash = 0;             // chain hash when indexed
    std::vector<int32_t> tokens;   // its tokens when indexed (compared on lookup)
    std::list<int32_t>::iterator lru;
    bool in_lru = false;
  };

  int32_t take_block();           // a free block, evicting the oldest cached one if needed
  void release_block(int32_t b);  // drops one reference
  void evict(int32_t b, bool announce = true);  // announce: tell the listener
  // Cached blocks matching `tokens` block by block, at most max_blocks.
  std::vector<int32_t> match(std::span<const int32_t> tokens, int64_t max_blocks) const;
  void zero_slot(int32_t slot);
  // Slots and blocks the pools hold: the options' and the pad state's.
  int64_t slots_held() const { return opt_.n_slots + opt_.pad_rows; }
  int64_t blocks_held() const { return opt_.n_blocks + opt_.pad_rows; }

  StateShape shape_;
  StateCacheOptions opt_;
  DeviceMemory& mem_;
  std::vector<DeviceBuffer> k_, v_;             // per attention layer
  // Snapshot index of speculative snapshot r of a slot (after the prefix cache's, one per block).
  int32_t spec_snapshot(int32_t slot, int64_t r) const;
  int64_t n_snapshots() const;

  std::vector<DeviceBuffer> conv_, snaps_;      // per conv layer
  std::vector<Block> blocks_;
  std::vector<int32_t> free_blocks_;            // a stack: lowest ids first out
  std::list<int32_t> lru_;                      // cached, unused blocks; front = evicted first
  std::unordered_map<uint64_t, int32_t> index_;  // chain hash → block
  std::vector<int32_t> free_slots_;
  std::vector<std::unique_ptr<Sequence>> open_;
  StateCacheStats counters_;
  PrefixCacheListener* listener_ = nullptr;
  std::vector<int32_t> pad_blocks_;  // the pad rows' blocks (their runs' one-block tables)
};

// Chain hash of a block: its parent's hash (0 for the first block) and its tokens.
uint64_t block_chain_hash(uint64_t parent, std::span<const int32_t> tokens);

}  // namespace lfm
