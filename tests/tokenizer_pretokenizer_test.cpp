// The regex pre-tokenizer against token-string vectors from the real LFM2 tokenizer
// (tests/data/assets/lfm2/test_vectors), which do not need the real vocabulary: digit groups
// must come out exactly, and every real token must lie inside one of our pre-tokens.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm {
namespace {

const Tokenizer& synthetic() {
  static const auto tok = load_tokenizer(test::data_dir() + "/tokenizer");
  return *tok;
}

nlohmann::json misc_vectors() {
  return test::read_json(test::data_dir() + "/assets/lfm2/test_vectors/lfm2_misc_vectors_and_tokenizer_facts.json");
}

// The vectors hold tokens either in byte-level form ("Ġworld") or as decoded text (" pass");
// turn both into text the way the ByteLevel decoder does (a token with a code point outside
// the byte alphabet, such as a literal space, is already text).
std::vector<std::string> real_tokens(const nlohmann::json& v) {
  std::vector<std::string> out;
  for (const auto& t : v["tokens"]) {
    const std::string s = t.get<std::string>();
    if (s == "<|startoftext|>") continue;
    std::string bytes;
    out.push_back(tok::symbols_to_bytes(s, bytes) ? bytes : s);
  }
  return out;
}

TEST(TokenizerPreTokenizer, UsesTheRealLfm2Regex) {
  const auto facts = misc_vectors()["facts"];
  const std::string real = facts["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>();
  EXPECT_EQ(synthetic().spec().pretokenizer_regex, real);
}

TEST(TokenizerPreTokenizer, DigitVectorsSplitExactlyLikeTheRealTokenizer) {
  // In these vectors every real token is a whole pre-token (digit groups, single spaces, "."),
  // except where BPE split a word; those cases are covered by the containment test below.
  int checked = 0;
  const nlohmann::json vectors = misc_vectors()["vectors"];
  for (const auto& v : vectors) {
    const std::string text = v["text"].get<std::string>();
    bool only_digits_spaces_dots = true;
    for (char c : text) only_digits_spaces_dots &= (c >= '0' && c <= '9') || c == ' ' || c == '.';
    if (!only_digits_spaces_dots) continue;
    EXPECT_EQ(synthetic().pre_tokenize(text), real_tokens(v)) << text;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(TokenizerPreTokenizer, EveryRealTokenFallsInsideOnePreToken) {
  const nlohmann::json vectors = misc_vectors()["vectors"];
  ASSERT_GE(vectors.size(), 9u);
  for (const auto& v : vectors) {
    const std::string text = v["text"].get<std::string>();
    // Pre-token boundaries must be a subset of the real token boundaries (BPE never merges
    // across pre-tokens).
    std::vector<size_t> token_ends, piece_ends;
    size_t pos = 0;
    for (const std::string& t : real_tokens(v)) token_ends.push_back(pos += t.size());
    pos = 0;
    for (const std::string& p : synthetic().pre_tokenize(text)) piece_ends.push_back(pos += p.size());
    ASSERT_EQ(pos, text.size()) << text;
    for (size_t end : piece_ends) {
      EXPECT_NE(std::find(token_ends.begin(), token_ends.end(), end), token_ends.end())
          << "pre-token boundary at byte " << end << " is not a token boundary in '" << text << "'";
    }
  }
}

TEST(TokenizerPreTokenizer, SplitsTheLlamaCppFingerprintTextAsDocumented) {
  // Spot checks of the regex branches on the chkhsh text (digits ≤ 3, contractions with
  // case-insensitive suffixes, whitespace runs before non-space, punctuation runs).
  const Tokenizer& t = synthetic();
  EXPECT_EQ(t.pre_tokenize("3333333"), (std::vector<std::string>{"333", "333", "3"}));
  EXPECT_EQ(t.pre_tokenize("'RE you"), (std::vector<std::string>{"'RE", " you"}));
  EXPECT_EQ(t.pre_tokenize("We'Ve a'lL"), (std::vector<std::string>{"We", "'Ve", " a", "'lL"}));
  EXPECT_EQ(t.pre_tokenize("a   b"), (std::vector<std::string>{"a", "  ", " b"}));
  EXPECT_EQ(t.pre_tokenize("x ...\n\ny"), (std::vector<std::string>{"x", " ...\n\n", "y"}));
  EXPECT_EQ(t.pre_tokenize("\n \n\n"), (std::vector<std::string>{"\n \n\n"}));
  EXPECT_EQ(t.pre_tokenize("end  "), (std::vector<std::string>{"end", "  "}));
  EXPECT_EQ(t.pre_tokenize("我想在apple工作1314151天"),
            (std::vector<std::string>{"我想在apple工作", "131", "415", "1", "天"}));
  EXPECT_EQ(t.pre_tokenize(""), std::vector<std::string>{});
}

TEST(TokenizerPreTokenizer, KnownRealIdIsReproducedForBos) {
  // "hello world" → [1, …]: the BOS id and its text come from the real added tokens.
  const auto v = misc_vectors()["vectors"][0];
  ASSERT_EQ(v["text"], "hello world");
  const auto ids = synthetic().encode("hello world");
  EXPECT_EQ(ids.front(), v["ids"][0].get<int32_t>());
  EXPECT_EQ(synthetic().id_to_token(ids.front()), v["tokens"][0].get<std::string>());
  EXPECT_EQ(tok::bytes_to_symbols(" world"), v["tokens"][2].get<std::string>());
}

}  // namespace
}  // namespace lfm
