// StreamingDetokenizer: every chunk is valid UTF-8 and the chunks add up to one-shot decode().
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/streaming_detokenizer.h"
#include "core/utf8.h"

namespace lfm {
namespace {

const Tokenizer& synthetic() {
  static const auto tok = load_tokenizer(test::data_dir() + "/tokenizer");
  return *tok;
}

// Streams `ids`, checking each chunk; returns the concatenation and how often bytes were held.
std::string stream(const std::vector<int32_t>& ids, bool skip_special, size_t* held = nullptr) {
  StreamingDetokenizer detok(synthetic(), skip_special);
  std::string all;
  for (int32_t id : ids) {
    const std::string chunk = detok.push(id);
    EXPECT_EQ(find_invalid_utf8(chunk), std::string::npos) << "chunk after id " << id;
    if (held && detok.pending_bytes() > 0) ++*held;
    all += chunk;
  }
  const std::string tail = detok.finish();
  EXPECT_EQ(find_invalid_utf8(tail), std::string::npos);
  EXPECT_EQ(detok.pending_bytes(), 0u);
  return all + tail;
}

TEST(TokenizerStreaming, ChunksConcatenateToOneShotDecode) {
  const auto strings = test::read_json(test::data_dir() + "/tokenizer/test_strings.json");
  size_t held = 0;
  for (const auto& s : strings) {
    const auto ids = synthetic().encode(s.get<std::string>(), true);
    for (bool skip : {false, true}) {
      EXPECT_EQ(stream(ids, skip, &held), synthetic().decode(ids, skip)) << s.dump();
    }
  }
  // The small vocabulary splits CJK, emoji and combining marks into byte tokens, so partial
  // characters must have been held back many times; otherwise this test proves nothing.
  EXPECT_GT(held, 100u);
}

TEST(TokenizerStreaming, MultiByteCharacterSplitAcrossByteTokens) {
  // "🦙" is four bytes; feeding its byte tokens one at a time yields nothing until the last.
  std::vector<int32_t> ids = synthetic().encode("a🦙b", false);
  StreamingDetokenizer detok(synthetic());
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(detok.push(id));
  chunks.push_back(detok.finish());
  std::string all;
  size_t empty_chunks = 0;
  for (const auto& c : chunks) {
    all += c;
    empty_chunks += c.empty();
  }
  EXPECT_EQ(all, "a🦙b");
  EXPECT_GE(empty_chunks, 1u) << "expected the emoji to be spread over several tokens";
}

TEST(TokenizerStreaming, IllFormedSequencesMatchLossyOneShotDecode) {
  // Random byte-level tokens make arbitrary byte strings, including truncated and invalid
  // sequences; streaming must still agree with decode() (U+FFFD in the same places).
  std::mt19937 rng(1234);
  std::vector<int32_t> candidates;
  for (int32_t id = 0; id < synthetic().vocab_size(); ++id) {
    if (synthetic().spec().vocab[id].empty()) continue;
    std::string bytes;
    synthetic().append_token_bytes(id, bytes);
    if (bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) >= 0x80) candidates.push_back(id);
  }
  ASSERT_EQ(candidates.size(), 128u);  // every non-ASCII byte has its own token
  candidates.push_back(*synthetic().token_to_id("a"));
  candidates.push_back(*synthetic().token_to_id("<|im_end|>"));
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 12);
    for (auto& id : ids) id = candidates[rng() % candidates.size()];
    for (bool skip : {false, true}) EXPECT_EQ(stream(ids, skip), synthetic().decode(ids, skip));
  }
}

TEST(TokenizerStreaming, FinishResetsForANewStream) {
  StreamingDetokenizer detok(synthetic());
  const auto ids = synthetic().encode("é", false);
  ASSERT_GE(ids.size(), 1u);
  detok.push(ids[0]);
  detok.finish();
  std::string again;
  for (int32_t id : synthetic().encode("ok", false)) again += detok.push(id);
  EXPECT_EQ(again + detok.finish(), "ok");
}

}  // namespace
}  // namespace lfm
