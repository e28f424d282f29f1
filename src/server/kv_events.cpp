#include "server/kv_events.h"

#include <msgpack.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace lfm::server {
namespace {

bool binds(const std::string& e) {  // vLLM's ZmqEventPublisher rule ("bind stable, connect volatile")
  return e.find('*') != std::string::npos || e.find("::") != std::string::npos || e.rfind("ipc://", 0) == 0 ||
         e.rfind("inproc://", 0) == 0;
}

std::string last_endpoint(void* socket) {
  char buf[256] = {};
  size_t len = sizeof(buf);
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf, &len) != 0) return {};
  return std::string(buf, strnlen(buf, sizeof(buf)));
}

void pack_str(msgpack_packer& pk, const std::string& s) { msgpack_pack_str_with_body(&pk, s.data(), s.size()); }

std::string seq_bytes(int64_t seq) {  // 8 bytes, big-endian (two's complement for the end marker -1)
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(seq) >> (56 - 8 * i));
  return b;
}

// Sends the frames as one multipart message; false when the socket refused (its HWM, no peer).
bool send_frames(void* socket, std::initializer_list<const std::string*> frames) {
  size_t i = 0;
  for (const std::string* f : frames) {
    const int more = ++i < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket, f->data(), f->size(), more | ZMQ_DONTWAIT) < 0) return false;
  }
  return true;
}

}  // namespace

std::string encode_kv_event_batch(const KvEventBatch& batch, int64_t block_tokens, const std::string& medium) {
  msgpack_sbuffer buf;
  msgpack_sbuffer_init(&buf);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
  msgpack_pack_array(&pk, 3);  // KVEventBatch: ts, events, data_parallel_rank
  msgpack_pack_double(&pk, batch.ts);
  msgpack_pack_array(&pk, batch.events.size());
  for (const KvEvent& e : batch.events) {
    switch (e.kind) {
      case KvEvent::kStored:
        // tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name
        msgpack_pack_array(&pk, 8);
        pack_str(pk, "BlockStored");
        msgpack_pack_array(&pk, 1);
        msgpack_pack_uint64(&pk, e.hash);
        if (e.parent) msgpack_pack_uint64(&pk, *e.parent); else msgpack_pack_nil(&pk);
        msgpack_pack_array(&pk, e.tokens.size());
        for (int32_t t : e.tokens) msgpack_pack_int32(&pk, t);
        msgpack_pack_int64(&pk, block_tokens);
        msgpack_pack_nil(&pk);
        pack_str(pk, medium);
        msgpack_pack_nil(&pk);
        break;
      case KvEvent::kRemoved:  // tag, block_hashes, medium
        msgpack_pack_array(&pk, 3);
        pack_str(pk, "BlockRemoved");
        msgpack_pack_array(&pk, 1);
        msgpack_pack_uint64(&pk, e.hash);
        pack_str(pk, medium);
        break;
      case KvEvent::kCleared:
        msgpack_pack_array(&pk, 1);
        pack_str(pk, "AllBlocksCleared");
        break;
    }
  }
  msgpack_pack_int(&pk, 0);  // data_parallel_rank: lfm runs one rank
  std::string out(buf.data, buf.size);
  msgpack_sbuffer_destroy(&buf);
  return out;
}

KvEventPublisher::KvEventPublisher(const KvEventsOptions& opt) : opt_(opt), none_hash_(kv_none_hash(opt.hash_seed)) {
  LFM_CHECK(!opt.endpoint.empty(), "kv events: the endpoint is empty (e.g. tcp://*:5557)");
  LFM_CHECK(opt.block_tokens >= 1, "kv events: block size must be positive, got ", opt.block_tokens);
  LFM_CHECK(opt.buffer_batches >= 1 && opt.queue_batches >= 1, "kv events: the replay buffer (", opt.buffer_batches,
            ") and the queue (", opt.queue_batches, ") must hold at least one batch");
  ctx_ = zmq_ctx_new();
  LFM_CHECK(ctx_, "kv events: cannot create a ZeroMQ context: ", zmq_strerror(zmq_errno()));
  auto fail = [&](const char* what, const std::string& endpoint) {
    const std::string why = zmq_strerror(zmq_errno());
    if (pub_) zmq_close(pub_);
    if (replay_) zmq_close(replay_);
    zmq_ctx_term(ctx_);
    throw Error("kv events: cannot " + std::string(what) + " " + endpoint + ": " + why);
  };
  pub_ = zmq_socket(ctx_, ZMQ_PUB);
  if (!pub_) fail("open a PUB socket for", opt.endpoint);
  const int linger_ms = 500;
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &opt.send_hwm, sizeof(opt.send_hwm));
  zmq_setsockopt(pub_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  if (binds(opt.endpoint)) {
    if (zmq_bind(pub_, opt.endpoint.c_str()) != 0) fail("bind", opt.endpoint);
    pub_bound_ = last_endpoint(pub_);
  } else if (zmq_connect(pub_, opt.endpoint.c_str()) != 0) {
    fail("connect to", opt.endpoint);
  }
  if (!opt.replay_endpoint.empty()) {
    replay_ = zmq_socket(ctx_, ZMQ_ROUTER);
    if (!replay_) fail("open a ROUTER socket for", opt.replay_endpoint);
    zmq_setsockopt(replay_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
    if (zmq_bind(replay_, opt.replay_endpoint.c_str()) != 0) fail("bind", opt.replay_endpoint);
    replay_bound_ = last_endpoint(replay_);
  }
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  zmq_close(pub_);
  if (replay_) zmq_close(replay_);
  zmq_ctx_term(ctx_);
}

void KvEventPublisher::count(uint64_t KvEventsStats::*field, uint64_t n) {
  std::lock_guard lock(mu_);
  stats_.*field += n;
}

KvEventsStats KvEventPublisher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// ---- the scheduler's half ----

void KvEventPublisher::block_stored(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> prefix) {
  const size_t B = static_cast<size_t>(opt_.block_tokens);
  if (prefix.size() < B || prefix.size() % B != 0) return;  // not whole blocks: nothing a consumer could hash
  const std::span<const int32_t> block = prefix.last(B);
  const auto media = [](std::span<const int32_t> keys) {
    return std::any_of(keys.begin(), keys.end(), [](int32_t k) { return k < 0; });
  };
  try {
    // Media rows have no token ids an indexer could hash: such a block and every block after it
    // (their hashes depend on it) are not announced (docs/design/kv_events.md).
    if (media(block)) {
      count(&KvEventsStats::blocks_skipped);
      return;
    }
    KvEvent e;
    KvDigest parent = none_hash_;
    if (prefix.size() > B) {
      if (auto it = announced_.find(parent_hash); it != announced_.end()) {
        parent = it->second;
      } else {
        // The parent is not announced now (media rows in the prefix; or an equal block held its
        // place in the cache and has left it, or the cache was flushed): the prefix decides.
        const std::span<const int32_t> before = prefix.first(prefix.size() - B);
        if (media(before)) {
          count(&KvEventsStats::blocks_skipped);
          return;
        }
        for (size_t i = 0; i < before.size(); i += B) parent = kv_block_digest(parent, before.subspan(i, B));
      }
      e.parent = kv_published_hash(parent);
    }
    const KvDigest d = kv_block_digest(parent, block);
    announced_[hash] = d;
    e.kind = KvEvent::kStored;
    e.hash = kv_published_hash(d);
    e.tokens.assign(block.begin(), block.end());
    pending_.events.push_back(std::move(e));
    count(&KvEventsStats::blocks_stored);
  } catch (...) {
    count(&KvEventsStats::blocks_skipped);  // out of memory: the block goes unannounced
  }
}

void KvEventPublisher::block_removed(uint64_t hash) {
  auto it = announced_.find(hash);
  if (it == announced_.end()) return;  // never announced (media)
  try {
    KvEvent e;
    e.kind = KvEvent::kRemoved;
    e.hash = kv_published_hash(it->second);
    announced_.erase(it);
    pending_.events.push_back(std::move(e));
    count(&KvEventsStats::blocks_removed);
  } catch (...) {
  }
}

void KvEventPublisher::all_cleared() {
  announced_.clear();
  try {
    KvEvent e;
    e.kind = KvEvent::kCleared;
    pending_.events.push_back(std::move(e));
    count(&KvEventsStats::clears);
  } catch (...) {
  }
}

void KvEventPublisher::step_end() {
  if (pending_.events.empty()) return;
  pending_.ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    std::lock_guard lock(mu_);
    if (static_cast<int64_t>(queue_.size()) >= opt_.queue_batches) {
      // The publisher thread is far behind: the batch is dropped, never waited for.
      ++stats_.batches_dropped;
    } else {
      try {
        queue_.push_back(std::move(pending_));
      } catch (...) {
        ++stats_.batches_dropped;
      }
    }
  }
  pending_ = KvEventBatch{};
  cv_.notify_one();
}

// ---- the publisher thread ----

void KvEventPublisher::run() {
  while (true) {
    std::deque<KvEventBatch> todo;
    bool stopping = false;
    {
      std::unique_lock lock(mu_);
      // Woken by a batch; otherwise every 20 ms, to answer replay requests.
      cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_ || !queue_.empty(); });
      todo.swap(queue_);
      stopping = stop_;
    }
    // A ZeroMQ socket handles its peers' messages (here: subscriptions) only when its own thread
    // calls into it; asking for its events makes it take them in before the batches go out.
    int events = 0;
    size_t events_size = sizeof(events);
    zmq_getsockopt(pub_, ZMQ_EVENTS, &events, &events_size);
    for (const KvEventBatch& b : todo) {
      try {
        std::string payload = encode_kv_event_batch(b, opt_.block_tokens, opt_.medium);
        const uint64_t seq = next_seq_++;
        const std::string seq8 = seq_bytes(static_cast<int64_t>(seq));
        send_frames(pub_, {&opt_.topic, &seq8, &payload});  // a PUB socket drops at its HWM, never blocks
        sent_.emplace_back(seq, std::move(payload));
        if (static_cast<int64_t>(sent_.size()) > opt_.buffer_batches) sent_.pop_front();
        count(&KvEventsStats::batches_sent);
      } catch (...) {  // out of memory: this batch is lost (counted), the server goes on
        count(&KvEventsStats::batches_dropped);
      }
    }
    if (replay_) {
      try {
        serve_replays();
      } catch (...) {  // out of memory while copying a request's frames: that request goes unanswered
      }
    }
    if (stopping) break;
  }
}

void KvEventPublisher::serve_replays() {
  while (true) {
    zmq_pollitem_t item{replay_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 0) <= 0 || !(item.revents & ZMQ_POLLIN)) return;
    // A request: [identity, "", start_seq (8 bytes, big-endian)], as vLLM's ROUTER reads it.
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, replay_, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
      more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    if (frames.size() != 3 || frames[2].empty() || frames[2].size() > 8) continue;  // not a replay request
    uint64_t start = 0;
    for (unsigned char c : frames[2]) start = (start << 8) | c;
    const std::string empty;
    for (const auto& [seq, payload] : sent_) {
      if (seq < start) continue;
      const std::string seq8 = seq_bytes(static_cast<int64_t>(seq));
      if (!send_frames(replay_, {&frames[0], &empty, &seq8, &payload})) break;
    }
    const std::string end = seq_bytes(-1);
    send_frames(replay_, {&frames[0], &empty, &end, &empty});
    count(&KvEventsStats::replays);
  }
}

}  // namespace lfm::server
