// vLLM-compatible KV-cache events (server/kv_events.h, docs/design/kv_events.md): the block hash
// against known answers made with Python's hashlib (tests/data/kv_events/make_hash_vectors.py),
// the msgpack payload against hand-derived bytes, and the publisher on real ZeroMQ sockets
// (topic, big-endian sequence numbers, batches per step, media blocks left out, replay).
#include <gtest/gtest.h>
#include <msgpack.h>
#include <zmq.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "server/kv_events.h"
#include "test_util.h"

namespace lfm::server {
namespace {

std::string hex(const KvDigest& d) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += {k[b >> 4], k[b & 15]};
  return s;
}

std::vector<uint64_t> chain(std::string_view seed, int64_t block, const std::vector<int32_t>& toks) {
  std::vector<uint64_t> out;
  KvDigest d = kv_none_hash(seed);
  for (size_t i = 0; i + static_cast<size_t>(block) <= toks.size(); i += static_cast<size_t>(block)) {
    d = kv_block_digest(d, std::span<const int32_t>(toks).subspan(i, static_cast<size_t>(block)));
    out.push_back(kv_published_hash(d));
  }
  return out;
}

TEST(KvBlockHash, MatchesPythonHashlibKnownAnswers) {
  std::ifstream f(test::data_dir() + "/kv_events/hash_vectors.json");
  ASSERT_TRUE(f) << "tests/data/kv_events/hash_vectors.json";
  const auto j = nlohmann::json::parse(f);
  for (const auto& [seed, h] : j["none_hash"].items()) EXPECT_EQ(hex(kv_none_hash(seed)), h.get<std::string>()) << seed;
  ASSERT_EQ(j["cases"].size(), 5u);
  for (const auto& c : j["cases"]) {
    const auto toks = c["tokens"].get<std::vector<int32_t>>();
    std::vector<uint64_t> want;
    for (const auto& h : c["hashes"]) want.push_back(std::stoull(h.get<std::string>()));
    EXPECT_EQ(chain(c["seed"].get<std::string>(), c["block_size"].get<int64_t>(), toks), want) << c.dump();
  }
  // The design note's worked example (docs/design/kv_events.md).
  EXPECT_EQ(chain("", 16, [] {
              std::vector<int32_t> t;
              for (int i = 1; i <= 32; ++i) t.push_back(i);
              return t;
            }()),
            (std::vector<uint64_t>{3304056276748800391ull, 17643853483570299582ull}));
  EXPECT_THROW(kv_block_digest(kv_none_hash(""), std::vector<int32_t>{1, -5}), Error);
}

TEST(KvEventWire, PayloadBytesAreVllmsPositionalLayout) {
  KvEventBatch b;
  b.ts = 0.0;
  b.events.push_back({KvEvent::kCleared, 0, std::nullopt, {}});
  // [0.0, [["AllBlocksCleared"]], 0]
  std::string want = "\x93\xcb" + std::string(8, '\0') + "\x91\x91\xb0" "AllBlocksCleared" + std::string(1, '\0');
  EXPECT_EQ(encode_kv_event_batch(b, 16, "GPU"), want);

  b.ts = 1.5;  // 0x3ff8000000000000
  b.events = {{KvEvent::kStored, 0x0102030405060708ull, std::nullopt, {1, 200}},
              {KvEvent::kStored, 300, 5, {70000, 0}},
              {KvEvent::kRemoved, 7, std::nullopt, {}}};
  want = std::string("\x93\xcb\x3f\xf8", 4) + std::string(6, '\0') + "\x93" +
         // ["BlockStored", [0x0102030405060708], nil, [1, 200], 2, nil, "GPU", nil]
         "\x98\xab" "BlockStored" "\x91\xcf\x01\x02\x03\x04\x05\x06\x07\x08" "\xc0" "\x92\x01\xcc\xc8" "\x02" "\xc0"
         "\xa3" "GPU" "\xc0" +
         // ["BlockStored", [300], 5, [70000, 0], 2, nil, "GPU", nil]
         std::string("\x98\xab" "BlockStored" "\x91\xcd\x01\x2c" "\x05" "\x92\xce\x00\x01\x11\x70", 24) + std::string(1, '\0') +
         "\x02\xc0\xa3" "GPU" "\xc0" +
         // ["BlockRemoved", [7], "GPU"]
         "\x93\xac" "BlockRemoved" "\x91\x07\xa3" "GPU" + std::string(1, '\0');
  EXPECT_EQ(encode_kv_event_batch(b, 2, "GPU"), want);
}

// ---- the publisher on sockets ----

struct Frames {
  std::vector<std::string> parts;
};

// One multipart message, or none within `ms`.
std::optional<Frames> recv_msg(void* s, int ms) {
  zmq_pollitem_t it{s, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, ms) <= 0) return std::nullopt;
  Frames f;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) return std::nullopt;
    f.parts.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return f;
}

int64_t be64(const std::string& s) {
  uint64_t v = 0;
  for (unsigned char c : s) v = (v << 8) | c;
  return static_cast<int64_t>(v);
}

// The batch's events as "Tag:hash" strings, decoded with msgpack-c's unpacker.
std::vector<std::string> decode(const std::string& payload, std::vector<std::vector<int64_t>>* tokens = nullptr) {
  msgpack_zone zone;
  msgpack_zone_init(&zone, 4096);
  msgpack_object o;
  std::vector<std::string> out;
  EXPECT_EQ(msgpack_unpack(payload.data(), payload.size(), nullptr, &zone, &o), MSGPACK_UNPACK_SUCCESS);
  EXPECT_EQ(o.type, MSGPACK_OBJECT_ARRAY);
  EXPECT_EQ(o.via.array.size, 3u);
  EXPECT_EQ(o.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
  const msgpack_object& events = o.via.array.ptr[1];
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack_object& e = events.via.array.ptr[i];
    std::string tag(e.via.array.ptr[0].via.str.ptr, e.via.array.ptr[0].via.str.size);
    if (e.via.array.size > 1) {
      tag += ":" + std::to_string(e.via.array.ptr[1].via.array.ptr[0].via.u64);
      if (tag.rfind("BlockStored", 0) == 0 && tokens) {
        std::vector<int64_t> t;
        const msgpack_object& ids = e.via.array.ptr[3];
        for (uint32_t k = 0; k < ids.via.array.size; ++k) t.push_back(static_cast<int64_t>(ids.via.array.ptr[k].via.u64));
        tokens->push_back(t);
      }
    }
    out.push_back(tag);
  }
  msgpack_zone_destroy(&zone);
  return out;
}

TEST(KvEventPublisher, PublishesOneBatchPerStepAndReplays) {
  KvEventsOptions o;
  o.endpoint = "tcp://127.0.0.1:*";  // '*': bound (any free port)
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.topic = "kv@pod-1@tiny";
  o.block_tokens = 2;
  KvEventPublisher pub(o);
  ASSERT_FALSE(pub.pub_bound().empty());
  ASSERT_FALSE(pub.replay_bound().empty());

  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  ASSERT_EQ(zmq_connect(sub, pub.pub_bound().c_str()), 0);
  ASSERT_EQ(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3), 0);
  // A PUB socket drops what it sends before the subscription arrives: probe until one gets through.
  std::optional<Frames> first;
  for (int i = 0; i < 100 && !first; ++i) {
    pub.block_stored(1000 + static_cast<uint64_t>(i), 0, std::vector<int32_t>{5, 6});
    pub.block_removed(1000 + static_cast<uint64_t>(i));
    pub.step_end();
    first = recv_msg(sub, 50);
  }
  ASSERT_TRUE(first);
  ASSERT_EQ(first->parts.size(), 3u);
  EXPECT_EQ(first->parts[0], "kv@pod-1@tiny");
  ASSERT_EQ(first->parts[1].size(), 8u);
  const int64_t seq0 = be64(first->parts[1]);
  const uint64_t h56 = chain("", 2, {5, 6})[0];
  EXPECT_EQ(decode(first->parts[2]), (std::vector<std::string>{"BlockStored:" + std::to_string(h56),
                                                                "BlockRemoved:" + std::to_string(h56)}));

  // One step: a chain of two blocks (the second's parent found by the cache's hash), a media
  // block and its descendant (left out), an eviction of the first block.
  pub.block_stored(11, 0, std::vector<int32_t>{1, 2});
  pub.block_stored(12, 11, std::vector<int32_t>{1, 2, 3, 4});
  pub.block_stored(13, 12, std::vector<int32_t>{1, 2, 3, 4, -9, -8});
  pub.block_stored(14, 13, std::vector<int32_t>{1, 2, 3, 4, -9, -8, 7, 7});
  pub.block_removed(13);  // never announced: nothing
  pub.block_removed(11);
  pub.step_end();
  pub.step_end();  // an empty step sends nothing
  pub.all_cleared();
  pub.step_end();
  // A block whose parent was never announced to the publisher: its hash comes from the prefix.
  pub.block_stored(21, 777, std::vector<int32_t>{1, 2, 3, 4});
  pub.step_end();

  const auto h = chain("", 2, {1, 2, 3, 4});
  auto m1 = recv_msg(sub, 2000), m2 = recv_msg(sub, 2000), m3 = recv_msg(sub, 2000);
  ASSERT_TRUE(m1 && m2 && m3);
  EXPECT_EQ(be64(m1->parts[1]), seq0 + 1);
  EXPECT_EQ(be64(m2->parts[1]), seq0 + 2);
  EXPECT_EQ(be64(m3->parts[1]), seq0 + 3);
  std::vector<std::vector<int64_t>> toks;
  EXPECT_EQ(decode(m1->parts[2], &toks),
            (std::vector<std::string>{"BlockStored:" + std::to_string(h[0]), "BlockStored:" + std::to_string(h[1]),
                                      "BlockRemoved:" + std::to_string(h[0])}));
  EXPECT_EQ(toks, (std::vector<std::vector<int64_t>>{{1, 2}, {3, 4}}));
  EXPECT_EQ(decode(m2->parts[2]), std::vector<std::string>{"AllBlocksCleared"});
  EXPECT_EQ(decode(m3->parts[2]), std::vector<std::string>{"BlockStored:" + std::to_string(h[1])});
  EXPECT_FALSE(recv_msg(sub, 100));
  const KvEventsStats st = pub.stats();
  EXPECT_EQ(st.blocks_skipped, 2u);
  EXPECT_EQ(st.clears, 1u);

  // Replay from the second batch on: (seq, payload) pairs as published, then the end marker.
  void* req = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(req, pub.replay_bound().c_str()), 0);
  const std::string start = [&] {
    std::string b(8, '\0');
    for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(seq0 + 1) >> (56 - 8 * i));
    return b;
  }();
  ASSERT_EQ(zmq_send(req, "", 0, ZMQ_SNDMORE), 0);
  ASSERT_EQ(zmq_send(req, start.data(), 8, 0), 8);
  std::vector<Frames> replies;
  while (auto r = recv_msg(req, 2000)) {
    replies.push_back(*r);
    if (be64(r->parts.at(1)) == -1) break;
  }
  ASSERT_EQ(replies.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(replies[i].parts.size(), 3u);
    EXPECT_EQ(replies[i].parts[0], "");
    EXPECT_EQ(be64(replies[i].parts[1]), seq0 + 1 + static_cast<int64_t>(i));
  }
  EXPECT_EQ(replies[0].parts[2], m1->parts[2]);
  EXPECT_EQ(replies[2].parts[2], m3->parts[2]);
  EXPECT_EQ(replies[3].parts[1], std::string(8, '\xff'));
  EXPECT_EQ(replies[3].parts[2], "");
  zmq_close(req);
  zmq_close(sub);
  zmq_ctx_term(ctx);
}

TEST(KvEventPublisher, AnEndpointThatCannotBeBoundIsAnError) {
  KvEventsOptions o;
  o.endpoint = "tcp://*:notaport";
  EXPECT_THROW(KvEventPublisher p(o), Error);
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "bogus://x";
  EXPECT_THROW(KvEventPublisher p(o), Error);
}

}  // namespace
}  // namespace lfm::server
