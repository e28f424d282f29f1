// `lfm serve --kv-events`: the prefix cache's changes published as vLLM's KV-cache events
// (msgpack KVEventBatch over a ZeroMQ PUB socket, with vLLM's replay ROUTER socket), so llm-d's
// precise prefix-cache scorer can route a request to the replica holding its prefix. The wire
// format and the hash rule are in docs/design/kv_events.md.
//
// Two halves. The scheduler thread calls the PrefixCacheListener methods: each turns a cache
// change into an event (computing the block's external hash from its tokens and its parent's),
// and step_end hands the step's events, as one batch, to a bounded queue, never waiting. The
// publisher's own thread numbers, encodes and sends the batches, keeps the last ones for replay,
// and answers replay requests.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/prefix_listener.h"
#include "server/kv_block_hash.h"

namespace lfm::server {

struct KvEventsOptions {
  // PUB endpoint, vLLM's rule: bound when it holds '*' or "::" or is ipc:// or inproc://,
  // otherwise connected (llm-d's indexer binds its SUB socket: give it tcp://INDEXER:5557).
  std::string endpoint;
  std::string replay_endpoint;  // ROUTER endpoint, always bound; empty: no replay
  std::string topic;            // the topic frame; llm-d parses "kv@<pod-id>@<model-name>"
  std::string hash_seed;        // NONE_HASH's seed (vLLM's PYTHONHASHSEED, llm-d's hashSeed)
  int64_t block_tokens = 16;    // the cache's block size (the indexer's must be the same)
  std::string medium = "GPU";   // BlockStored / BlockRemoved medium: "GPU" or "CPU"
  int64_t buffer_batches = 10000;  // batches kept for replay (vLLM buffer_steps)
  int64_t queue_batches = 100000;  // batches waiting for the publisher thread (vLLM max_queue_size)
  int send_hwm = 100000;           // the PUB socket's high-water mark (vLLM hwm)
};

// One event as the scheduler saw it.
struct KvEvent {
  enum Kind { kStored, kRemoved, kCleared } kind = kStored;
  uint64_t hash = 0;                // the published (64-bit) block hash
  std::optional<uint64_t> parent;   // kStored: the parent block's, none for a first block
  std::vector<int32_t> tokens;      // kStored: the block's token ids
};

struct KvEventBatch {
  double ts = 0;  // seconds since the Unix epoch
  std::vector<KvEvent> events;
};

// The msgpack payload of a batch: [ts, [event...], 0] with vLLM's positional (array_like) events.
std::string encode_kv_event_batch(const KvEventBatch& batch, int64_t block_tokens, const std::string& medium);

struct KvEventsStats {
  uint64_t batches_sent = 0, batches_dropped = 0, replays = 0;
  uint64_t blocks_stored = 0, blocks_removed = 0, clears = 0;
  uint64_t blocks_skipped = 0;  // stored blocks not announced: media rows in them or before them
};

class KvEventPublisher final : public PrefixCacheListener {
 public:
  // Opens the sockets now: throws lfm::Error naming an endpoint that cannot be bound or connected.
  explicit KvEventPublisher(const KvEventsOptions& opt);
  // Sends what is queued, then closes (pending messages get up to half a second).
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // PrefixCacheListener, on the scheduler thread.
  void block_stored(uint64_t hash, uint64_t parent, std::span<const int32_t> prefix) override;
  void block_removed(uint64_t hash) override;
  void all_cleared() override;
  void step_end() override;

  KvEventsStats stats() const;
  // The endpoints as bound (a tcp port 0 resolved), for logs and tests; empty when connected.
  const std::string& pub_bound() const { return pub_bound_; }
  const std::string& replay_bound() const { return replay_bound_; }

 private:
  void run();             // the publisher thread
  void serve_replays();   // answers every replay request waiting on the ROUTER socket
  void count(uint64_t KvEventsStats::*field, uint64_t n = 1);

  KvEventsOptions opt_;
  KvDigest none_hash_{};
  void* ctx_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  std::string pub_bound_, replay_bound_;

  // Scheduler thread only: external digests of the announced blocks, by the cache's chain hash.
  std::unordered_map<uint64_t, KvDigest> announced_;
  KvEventBatch pending_;

  mutable std::mutex mu_;  // guards queue_, stop_, stats_
  std::condition_variable cv_;
  std::deque<KvEventBatch> queue_;
  bool stop_ = false;
  KvEventsStats stats_;

  // Publisher thread only.
  uint64_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> sent_;  // (seq, payload), the last buffer_batches
  std::thread thread_;
};

}  // namespace lfm::server
