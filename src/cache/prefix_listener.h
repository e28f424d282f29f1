// What the prefix cache holds, as it changes: the state cache tells a listener when a block
// becomes reusable, when one leaves, and when everything is forgotten. `lfm serve --kv-events`
// builds vLLM's KV-cache events from it (server/kv_events.h); the cache knows nothing of them.
#pragma once

#include <cstdint>
#include <span>

namespace lfm {

// Called on the cache owner's thread (the engine's scheduler), from inside the cache's calls, so
// an implementation must be quick and must not throw (it queues; it never waits on a network).
class PrefixCacheListener {
 public:
  virtual ~PrefixCacheListener() = default;
  // A full block entered the prefix cache: its KV and the conv-state snapshot at its end are kept,
  // so a later sequence can resume after it. `hash` is the cache's chain hash of the block,
  // `parent` the chain hash of the block before it (0 for a sequence's first block), `prefix`
  // every key of the sequence up to the block's end (the block's own keys are the last
  // block_tokens; a negative key is a media row, engine/media_keys.h). Once per stay in the cache.
  virtual void block_stored(uint64_t hash, uint64_t parent, std::span<const int32_t> prefix) = 0;
  // A block announced by block_stored left the cache (evicted for room, or forgotten).
  virtual void block_removed(uint64_t hash) = 0;
  // Every block was forgotten at once (no block_removed for them).
  virtual void all_cleared() = 0;
  // The owner's unit of work ended (the engine's step): what came before goes out as one batch.
  virtual void step_end() {}
};

}  // namespace lfm
