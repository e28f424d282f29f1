// Spoken turns (engine/spoken_turn.h): a reply recorded from its events, put back at its
// placeholder among audio clips' placeholders (frames at the right positions, moved by the clips'
// expansion), the refusals; and the server's store of replies by id (server/chat_speech.h): least
// recently used out under its byte budget, and expiry.
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"

#include "engine/spoken_turn.h"
#include "server/chat_speech.h"

namespace lfm {
namespace {

Event token(int32_t id, std::string text = "") {
  Event e;
  e.kind = Event::Kind::kToken;
  e.token = id;
  e.text = std::move(text);
  return e;
}

Event frame(std::vector<int32_t> codes, bool end = false) {
  Event e;
  e.kind = Event::Kind::kAudio;
  e.audio_codes = std::move(codes);
  e.audio_end = end;
  return e;
}

Event done(FinishReason why, std::string stop = "") {
  Event e;
  e.kind = Event::Kind::kDone;
  e.finish = why;
  e.stop = std::move(stop);
  return e;
}

TEST(SpokenTurn, RecorderKeepsTheOrderAndDropsTheStopId) {
  SpokenReplyRecorder rec(2, 10);
  rec.add(token(40, "Hi"));
  rec.add(frame({1, 2}));
  rec.add(frame({3, 4}));
  Event samples_only = frame({});
  samples_only.audio = {0.1f, 0.2f};
  rec.add(samples_only);  // adds nothing
  rec.add(token(41, " there"));
  rec.add(frame({9, 9}, true));
  rec.add(token(7));  // <|im_end|>: the stop id
  rec.add(done(FinishReason::kStop));
  const SpokenReply r = rec.take();
  EXPECT_EQ(r.ids, (std::vector<int32_t>{40, SpokenReply::kFrame, SpokenReply::kFrame, 41, SpokenReply::kFrame}));
  EXPECT_EQ(r.codes, (std::vector<int32_t>{1, 2, 3, 4, 9, 9}));
  EXPECT_EQ(r.frames(), 3);
  EXPECT_EQ(r.transcript, "Hi there");
  // Cut by length: the last id stays.
  SpokenReplyRecorder cut(2, 10);
  cut.add(token(40));
  cut.add(done(FinishReason::kLength));
  EXPECT_EQ(cut.take().ids, std::vector<int32_t>{40});
  SpokenReplyRecorder bad(2, 10);
  EXPECT_THROW(bad.add(frame({1, 2, 3})), Error);
}

TEST(SpokenTurn, PutBackAmongClipsAndMovedByTheirExpansion) {
  auto reply = std::make_shared<SpokenReply>();
  reply->codebooks = 2;
  reply->audio_vocab = 10;
  reply->ids = {50, SpokenReply::kFrame, SpokenReply::kFrame, 51, SpokenReply::kFrame};
  reply->codes = {1, 2, 3, 4, 5, 6};
  const int32_t P = 99;
  // [clip] text [spoken] text [clip]
  const std::vector<int32_t> ids = {1, P, 5, P, 6, P, 7};
  const std::vector<std::shared_ptr<const SpokenReply>> replies = {reply};
  const SpokenPrompt sp = put_spoken_replies(ids, P, {false, true, false}, replies, 0);
  EXPECT_EQ(sp.ids, (std::vector<int32_t>{1, P, 5, 50, 0, 0, 51, 0, 6, P, 7}));
  EXPECT_EQ(sp.kept, (std::vector<int64_t>{1, 9}));
  ASSERT_EQ(sp.frames.size(), 2u);
  EXPECT_EQ(sp.frames[0]->position, 4);
  EXPECT_EQ(sp.frames[0]->frames, 2);
  EXPECT_EQ(sp.frames[0]->codes, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(sp.frames[1]->position, 7);
  EXPECT_EQ(sp.frames[1]->codes, (std::vector<int32_t>{5, 6}));
  // The first clip takes 5 positions, the second 3: only the first moves the frames (by 4).
  const std::vector<int64_t> tokens = {5, 3};
  const auto moved = shift_frames(sp, tokens);
  EXPECT_EQ(moved[0]->position, 8);
  EXPECT_EQ(moved[1]->position, 11);
  EXPECT_EQ(moved[0]->codes, sp.frames[0]->codes);
  // Refusals: counts, an empty reply, a code outside the vocabulary, frames that do not add up.
  EXPECT_THROW(put_spoken_replies(ids, P, {false, true}, replies, 0), Error);
  EXPECT_THROW(put_spoken_replies(ids, P, {true, true, false}, replies, 0), Error);
  auto empty = std::make_shared<SpokenReply>(*reply);
  empty->ids.clear();
  EXPECT_THROW(put_spoken_replies(ids, P, {false, true, false}, std::vector<std::shared_ptr<const SpokenReply>>{empty}, 0),
               Error);
  auto wild = std::make_shared<SpokenReply>(*reply);
  wild->codes[3] = 10;
  EXPECT_THROW(put_spoken_replies(ids, P, {false, true, false}, std::vector<std::shared_ptr<const SpokenReply>>{wild}, 0),
               Error);
  auto extra = std::make_shared<SpokenReply>(*reply);
  extra->ids.push_back(SpokenReply::kFrame);
  EXPECT_THROW(put_spoken_replies(ids, P, {false, true, false}, std::vector<std::shared_ptr<const SpokenReply>>{extra}, 0),
               Error);
}

std::shared_ptr<const SpokenReply> reply_of(size_t n_ids) {
  auto r = std::make_shared<SpokenReply>();
  r->codebooks = 1;
  r->audio_vocab = 4;
  r->ids.assign(n_ids, 3);
  return r;
}

TEST(SpokenReplyStore, LeastRecentlyUsedOutUnderTheBudget) {
  const size_t one = reply_of(100)->bytes() + 40;  // a reply and its id
  server::SpokenReplyStore store(2 * one + one / 2, 3600);
  const std::string a = store.new_id(), b = store.new_id(), c = store.new_id();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("audio_", 0), 0u);
  store.put(a, reply_of(100));
  store.put(b, reply_of(100));
  EXPECT_TRUE(store.find(a));  // a is now the most recently used
  store.put(c, reply_of(100));  // b goes
  EXPECT_TRUE(store.find(a));
  EXPECT_FALSE(store.find(b));
  EXPECT_TRUE(store.find(c));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_LE(store.bytes(), 2 * one + one / 2);
  store.put(store.new_id(), reply_of(100000));  // larger than the whole budget: not kept
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.find(a));
}

TEST(SpokenReplyStore, Expiry) {
  server::SpokenReplyStore store(1 << 20, 1);
  const std::string id = store.new_id();
  const int64_t expires = store.put(id, reply_of(4));
  EXPECT_GT(expires, 0);
  EXPECT_TRUE(store.find(id));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_FALSE(store.find(id));
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace lfm
