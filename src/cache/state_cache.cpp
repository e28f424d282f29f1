#include "cache/state_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace lfm {

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

size_t elem_bytes(DType t) { return static_cast<size_t>(dtype_traits(t).block_bytes); }

}  // namespace

uint64_t block_chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x6c666d2d70726566ull);  // "lfm-pref"
  for (int32_t t : tokens) h = mix64(h ^ static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ull;
  return h;
}

StateBytes state_bytes(const StateShape& s, const StateCacheOptions& o) {
  StateBytes b;
  const size_t e = elem_bytes(o.type);
  b.kv_per_token = static_cast<size_t>(2 * s.attn_layers * s.kv_heads * s.head_dim) * e;
  b.kv_per_block = b.kv_per_token * static_cast<size_t>(o.block_tokens);
  b.conv_per_slot = static_cast<size_t>(s.conv_layers * std::max<int64_t>(s.conv_kernel - 1, 0) * s.conv_dim) * e;
  b.snapshot_per_block = o.prefix_cache ? b.conv_per_slot : 0;
  const size_t pad = static_cast<size_t>(std::max<int64_t>(o.pad_rows, 0));
  b.kv_total = b.kv_per_block * (static_cast<size_t>(o.n_blocks) + pad);
  b.conv_total = b.conv_per_slot * (static_cast<size_t>(o.n_slots) + pad);
  b.snapshots_total = b.snapshot_per_block * static_cast<size_t>(o.n_blocks);
  b.spec_total = b.conv_per_slot * static_cast<size_t>(o.n_slots) * static_cast<size_t>(std::max<int64_t>(o.draft_tokens, 0));
  return b;
}

StateCache::StateCache(const StateShape& shape, const StateCacheOptions& opt, DeviceMemory& memory)
    : shape_(shape), opt_(opt), mem_(memory) {
  LFM_CHECK(is_state_type(opt.type), "state: cache type must be f32, f16 or bf16, got ", dtype_name(opt.type));
  LFM_CHECK(opt.block_tokens >= 1 && opt.block_tokens <= (1 << 20), "state: block size must be in [1, 1048576], got ",
            opt.block_tokens);
  LFM_CHECK(opt.n_blocks >= 1 && opt.n_blocks < (int64_t{1} << 31), "state: the pool needs at least one block, got ",
            opt.n_blocks);
  LFM_CHECK(opt.n_slots >= 1 && opt.n_slots < (1 << 20), "state: the pool needs at least one sequence slot, got ",
            opt.n_slots);
  LFM_CHECK(shape.conv_layers == 0 || shape.conv_kernel >= 1, "state: conv kernel must be positive, got ",
            shape.conv_kernel);
  LFM_CHECK(opt.draft_tokens >= 0 && opt.draft_tokens <= 256, "state: draft tokens must be in [0, 256], got ",
            opt.draft_tokens);
  LFM_CHECK(opt.pad_rows >= 0 && opt.pad_rows <= 4096, "state: pad rows must be in [0, 4096], got ", opt.pad_rows);
  const StateBytes b = bytes();
  const size_t kv_layer = b.kv_per_block / 2 / std::max<int64_t>(shape.attn_layers, 1);
  for (int64_t l = 0; l < shape.attn_layers; ++l) {
    k_.push_back(mem_.allocate(kv_layer * static_cast<size_t>(blocks_held())));
    v_.push_back(mem_.allocate(kv_layer * static_cast<size_t>(blocks_held())));
  }
  const size_t conv_layer = b.conv_per_slot / std::max<int64_t>(shape.conv_layers, 1);
  for (int64_t l = 0; l < shape.conv_layers; ++l) {
    conv_.push_back(mem_.allocate(conv_layer * static_cast<size_t>(slots_held())));
    snaps_.push_back(mem_.allocate(conv_layer * static_cast<size_t>(n_snapshots())));
  }
  blocks_.resize(static_cast<size_t>(opt.n_blocks));
  for (int64_t i = opt.n_blocks - 1; i >= 0; --i) free_blocks_.push_back(static_cast<int32_t>(i));
  for (int64_t i = opt.n_slots - 1; i >= 0; --i) free_slots_.push_back(static_cast<int32_t>(i));
  for (int64_t i = 0; i < opt.pad_rows; ++i) pad_blocks_.push_back(static_cast<int32_t>(opt.n_blocks + i));
}

StateCache::~StateCache() = default;

StateCacheStats StateCache::stats() const {
  StateCacheStats s = counters_;
  s.blocks_total = opt_.n_blocks;
  s.blocks_free = static_cast<int64_t>(free_blocks_.size());
  s.blocks_cached = static_cast<int64_t>(lru_.size());
  s.blocks_used = s.blocks_total - s.blocks_free - s.blocks_cached;
  s.slots_total = opt_.n_slots;
  s.slots_used = opt_.n_slots - static_cast<int64_t>(free_slots_.size());
  return s;
}

// ---- sequences ----

Sequence* StateCache::open(int64_t max_tokens) {
  LFM_CHECK(max_tokens >= 1, "state: context size must be positive, got ", max_tokens);
  const int64_t need = (max_tokens + opt_.block_tokens - 1) / opt_.block_tokens;
  LFM_CHECK(need <= opt_.n_blocks, "state: a context of ", max_tokens, " tokens needs ", need,
            " KV blocks, the pool has ", opt_.n_blocks, " (raise the memory budget or lower the context size)");
  LFM_CHECK(!free_slots_.empty(), "state: all ", opt_.n_slots, " sequence slots are in use");
  auto seq = std::make_unique<Sequence>();
  seq->slot_ = free_slots_.back();
  free_slots_.pop_back();
  seq->max_tokens_ = max_tokens;
  zero_slot(seq->slot_);
  open_.push_back(std::move(seq));
  return open_.back().get();
}

void StateCache::close(Sequence* seq) {
  if (!seq) return;
  auto it = std::find_if(open_.begin(), open_.end(), [&](const auto& p) { return p.get() == seq; });
  LFM_CHECK(it != open_.end(), "state: closing a sequence this cache did not open");
  reset(*seq);
  free_slots_.push_back(seq->slot_);
  open_.erase(it);
}

void StateCache::reset(Sequence& seq) {
  // Tail first, so a sequence's last blocks are evicted before its first ones.
  for (auto b = seq.blocks_.rbegin(); b != seq.blocks_.rend(); ++b) release_block(*b);
  seq.blocks_.clear();
  seq.block_hash_.clear();
  seq.tokens_.clear();
  seq.checkpoints_.clear();
  seq.spec_base_ = -1;
  seq.reused_ = 0;
  zero_slot(seq.slot_);
}

void StateCache::zero_slot(int32_t slot) {
  for (auto& c : conv_) {
    const size_t per = c.size() / static_cast<size_t>(slots_held());
    mem_.fill_zero(static_cast<uint8_t*>(c.data()) + per * static_cast<size_t>(slot), per);
  }
}

// ---- blocks ----

int32_t StateCache::take_block() {
  if (free_blocks_.empty()) {
    LFM_CHECK(!lru_.empty(), "state: no KV block is free or evictable");
    evict(lru_.front());
  }
  const int32_t b = free_blocks_.back();
  free_blocks_.pop_back();
  blocks_[b].refs = 1;
  return b;
}

void StateCache::release_block(int32_t b) {
  Block& blk = blocks_[b];
  LFM_CHECK(blk.refs > 0, "state: block ", b, " released more often than taken");
  if (--blk.refs > 0) return;
  if (blk.indexed) {
    blk.lru = lru_.insert(lru_.end(), b);
    blk.in_lru = true;
  } else {
    free_blocks_.push_back(b);
  }
}

void StateCache::evict(int32_t b, bool announce) {
  Block& blk = blocks_[b];
  if (blk.in_lru) {
    lru_.erase(blk.lru);
    blk.in_lru = false;
  }
  if (blk.indexed) {
    auto it = index_.find(blk.hash);
    if (it != index_.end() && it->second == b) index_.erase(it);
    blk.indexed = false;
    blk.tokens.clear();
    ++counters_.evicted_blocks;
    if (announce && listener_) listener_->block_removed(blk.hash);
  }
  free_blocks_.push_back(b);
}

void StateCache::clear_prefix_cache() {
  while (!lru_.empty()) evict(lru_.front());
}

void StateCache::flush_prefix_cache() {
  while (!lru_.empty()) evict(lru_.front(), /*announce=*/false);
  // What is left indexed is held by open sequences: it stays theirs, unindexed, so it is freed
  // (not cached) on release and no later sequence attaches it.
  for (Block& blk : blocks_) {
    if (!blk.indexed) continue;
    blk.indexed = false;
    blk.tokens.clear();
  }
  index_.clear();
  if (listener_) listener_->all_cleared();
}

int64_t StateCache::blocks_needed(const Sequence& seq, int64_t n) const {
  const int64_t need = (seq.n_past() + n + opt_.block_tokens - 1) / opt_.block_tokens;
  return std::max<int64_t>(0, need - static_cast<int64_t>(seq.blocks_.size()));
}

bool StateCache::reserve(Sequence& seq, int64_t n) {
  LFM_CHECK(n >= 0, "state: cannot reserve ", n, " tokens");
  LFM_CHECK(seq.n_past() + n <= seq.max_tokens_, "state: sequence would reach ", seq.n_past() + n,
            " tokens, past the context size ", seq.max_tokens_);
  const int64_t need = blocks_needed(seq, n);
  if (need > blocks_available()) return false;
  for (int64_t i = 0; i < need; ++i) seq.blocks_.push_back(take_block());
  return true;
}

int64_t StateCache::n_snapshots() const {
  return (opt_.prefix_cache ? opt_.n_blocks : 0) + opt_.n_slots * opt_.draft_tokens;
}

int32_t StateCache::spec_snapshot(int32_t slot, int64_t r) const {
  return static_cast<int32_t>((opt_.prefix_cache ? opt_.n_blocks : 0) + static_cast<int64_t>(slot) * opt_.draft_tokens + r);
}

SeqRun StateCache::run(Sequence& seq, int64_t row0, int64_t n, bool speculative, int64_t sure) {
  LFM_CHECK(n >= 1 && blocks_needed(seq, n) == 0, "state: run of ", n, " tokens without a reservation");
  LFM_CHECK(speculative || seq.spec_base_ < 0, "state: a plain step while a speculative chain of ",
            seq.speculative_tokens(), " tokens is open (keep its accepted prefix first)");
  LFM_CHECK(sure >= 0 && sure < n && (sure == 0 || seq.spec_base_ < 0), "state: ", sure, " sure tokens in a step of ",
            n, seq.spec_base_ >= 0 ? " inside an open speculative chain" : "");
  const int64_t base = !speculative ? -1 : seq.spec_base_ >= 0 ? seq.spec_base_ : seq.n_past() + sure;
  LFM_CHECK(!speculative || seq.n_past() + n - base <= opt_.draft_tokens + 1, "state: a speculative chain of ",
            seq.n_past() + n - base, " tokens, but the cache keeps snapshots for ", opt_.draft_tokens,
            " drafted tokens");
  seq.checkpoints_.clear();
  seq.spec_base_ = base;
  const int64_t B = opt_.block_tokens;
  for (int64_t p = seq.n_past(); p < seq.n_past() + n; ++p) {  // ascending positions
    if (opt_.prefix_cache && (p + 1) % B == 0) seq.checkpoints_.push_back({p, seq.blocks_[p / B]});
    if (speculative && p >= base && p - base < opt_.draft_tokens)
      seq.checkpoints_.push_back({p, spec_snapshot(seq.slot_, p - base)});
  }
  SeqRun r;
  r.row0 = row0;
  r.n_rows = n;
  r.pos0 = seq.n_past();
  r.blocks = seq.blocks_;
  r.conv_slot = seq.slot_;
  r.checkpoints = seq.checkpoints_;
  return r;
}

void StateCache::commit(Sequence& seq, std::span<const int32_t> tokens) {
  const int64_t B = opt_.block_tokens;
  LFM_CHECK(blocks_needed(seq, static_cast<int64_t>(tokens.size())) == 0, "state: commit of ", tokens.size(),
            " tokens without a reservation");
  seq.tokens_.insert(seq.tokens_.end(), tokens.begin(), tokens.end());
  seq.checkpoints_.clear();
  // Only blocks before an open chain are certain; the chain's enter once kept.
  const int64_t full = (seq.spec_base_ >= 0 ? seq.spec_base_ : seq.n_past()) / B;
  while (static_cast<int64_t>(seq.block_hash_.size()) < full) {
    const int64_t j = static_cast<int64_t>(seq.block_hash_.size());
    const uint64_t parent = j == 0 ? 0 : seq.block_hash_[j - 1];
    const std::span<const int32_t> toks(seq.tokens_.data() + j * B, static_cast<size_t>(B));
    const uint64_t h = block_chain_hash(parent, toks);
    seq.block_hash_.push_back(h);
    if (!opt_.prefix_cache) continue;
    Block& blk = blocks_[seq.blocks_[j]];
    if (blk.indexed || index_.count(h)) continue;  // shared already, or an equal block is cached
    blk.indexed = true;
    blk.hash = h;
    blk.tokens.assign(toks.begin(), toks.end());
    index_[h] = seq.blocks_[j];
    if (listener_) listener_->block_stored(h, parent, std::span<const int32_t>(seq.tokens_.data(), static_cast<size_t>((j + 1) * B)));
  }
}

void StateCache::commit_accepted(Sequence& seq, int64_t n_keep) {
  const int64_t n = seq.speculative_tokens();
  LFM_CHECK(seq.spec_base_ >= 0, "state: commit_accepted, but the sequence is not speculative (no chain is open)");
  LFM_CHECK(n_keep >= 1 && n_keep <= n, "state: keeping ", n_keep, " of ", n, " speculative tokens (at least one, at most all)");
  const int64_t base = seq.spec_base_;
  seq.tokens_.resize(static_cast<size_t>(base + n_keep));
  seq.spec_base_ = -1;
  commit(seq, {});  // index the blocks the kept tokens filled
  if (n_keep == n) return;  // everything kept: the state is already right
  const int32_t snap = spec_snapshot(seq.slot_, n_keep - 1);  // the conv state after the last kept token
  for (size_t l = 0; l < conv_.size(); ++l) {
    const size_t per = conv_[l].size() / static_cast<size_t>(slots_held());
    mem_.copy(static_cast<uint8_t*>(conv_[l].data()) + per * static_cast<size_t>(seq.slot_),
              static_cast<const uint8_t*>(snaps_[l].data()) + per * static_cast<size_t>(snap), per);
  }
}

// ---- prefix cache ----

std::vector<int32_t> StateCache::match(std::span<const int32_t> tokens, int64_t max_blocks) const {
  std::vector<int32_t> found;
  if (!opt_.prefix_cache) return found;
  const int64_t B = opt_.block_tokens;
  uint64_t parent = 0;
  for (int64_t j = 0; j < max_blocks; ++j) {
    const std::span<const int32_t> toks = tokens.subspan(static_cast<size_t>(j * B), static_cast<size_t>(B));
    const uint64_t h = block_chain_hash(parent, toks);
    auto it = index_.find(h);
    if (it == index_.end()) break;
    const Block& blk = blocks_[it->second];
    if (!std::equal(toks.begin(), toks.end(), blk.tokens.begin(), blk.tokens.end())) break;
    found.push_back(it->second);
    parent = h;
  }
  return found;
}

int64_t StateCache::cached_prefix(std::span<const int32_t> tokens) const {
  if (tokens.empty()) return 0;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / opt_.block_tokens;
  return static_cast<int64_t>(match(tokens, max_blocks).size()) * opt_.block_tokens;
}

int64_t StateCache::attach_prefix(Sequence& seq, std::span<const int32_t> tokens) {
  LFM_CHECK(seq.n_past() == 0 && seq.blocks_.empty(), "state: a prefix can only be attached to an empty sequence");
  counters_.prefix_lookup_tokens += static_cast<int64_t>(tokens.size());
  if (tokens.empty()) return 0;
  const int64_t B = opt_.block_tokens;
  const int64_t max_blocks =
      std::min((static_cast<int64_t>(tokens.size()) - 1) / B, seq.max_tokens_ / B);
  const std::vector<int32_t> found = match(tokens, max_blocks);
  if (found.empty()) return 0;
  uint64_t parent = 0;
  for (size_t j = 0; j < found.size(); ++j) {
    Block& blk = blocks_[found[j]];
    if (blk.refs == 0 && blk.in_lru) {
      lru_.erase(blk.lru);
      blk.in_lru = false;
    }
    ++blk.refs;
    seq.blocks_.push_back(found[j]);
    parent = blk.hash;
    seq.block_hash_.push_back(parent);
  }
  const int64_t n = static_cast<int64_t>(found.size()) * B;
  seq.tokens_.assign(tokens.begin(), tokens.begin() + n);
  // The conv state after the prefix's last token: that block's snapshot.
  const int32_t last = found.back();
  for (size_t l = 0; l < conv_.size(); ++l) {
    const size_t per = conv_[l].size() / static_cast<size_t>(slots_held());
    mem_.copy(static_cast<uint8_t*>(conv_[l].data()) + per * static_cast<size_t>(seq.slot_),
              static_cast<const uint8_t*>(snaps_[l].data()) + per * static_cast<size_t>(last), per);
  }
  seq.reused_ = n;
  counters_.prefix_hit_tokens += n;
  return n;
}

// ---- pools ----

KvPool StateCache::kv_pool(int64_t attn_layer) const {
  LFM_CHECK(attn_layer >= 0 && attn_layer < shape_.attn_layers, "state: no attention layer ", attn_layer);
  KvPool p;
  p.k = k_[attn_layer].data();
  p.v = v_[attn_layer].data();
  p.type = opt_.type;
  p.n_blocks = blocks_held();
  p.block_tokens = opt_.block_tokens;
  p.kv_heads = shape_.kv_heads;
  p.head_dim = shape_.head_dim;
  return p;
}

ConvPool StateCache::conv_pool(int64_t conv_layer) const {
  LFM_CHECK(conv_layer >= 0 && conv_layer < shape_.conv_layers, "state: no conv layer ", conv_layer);
  ConvPool p;
  p.state = conv_[conv_layer].data();
  p.snapshots = n_snapshots() > 0 ? snaps_[conv_layer].data() : nullptr;
  p.type = opt_.type;
  p.n_slots = slots_held();
  p.n_snapshots = n_snapshots();
  p.rows = shape_.conv_kernel - 1;
  p.dim = shape_.conv_dim;
  return p;
}

SeqRun StateCache::pad_run(int64_t i, int64_t row0) const {
  LFM_CHECK(i >= 0 && i < opt_.pad_rows, "state: pad row ", i, ", but the cache has pad state for ", opt_.pad_rows);
  SeqRun r;
  r.row0 = row0;
  r.n_rows = 1;
  r.pos0 = 0;
  r.blocks = std::span<const int32_t>(&pad_blocks_[static_cast<size_t>(i)], 1);
  r.conv_slot = static_cast<int32_t>(opt_.n_slots + i);
  return r;
}

}  // namespace lfm
