// Token masks (grammar/grammar_matcher.h) against a brute-force mask: a token is allowed exactly
// when the text so far plus its bytes is a prefix of the grammar's language.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar_test_util.h"

namespace lfm::grammar {
namespace {

constexpr int32_t kEos = 0;
constexpr int32_t kCallStart = 1;
constexpr int32_t kCallEnd = 2;

// A vocabulary of every single byte, pieces of JSON and code, multi-byte UTF-8 and random
// strings over a small alphabet; ids 0-2 are special (end of sequence, two markers).
std::shared_ptr<const TokenVocabulary> test_vocab(uint32_t seed, size_t n_random) {
  std::vector<std::string> bytes = {"", "", ""};
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\": ", "\",", "\", \"", "\"}", "}}", "[{", "true", "false", "null", "nul",
                        "1.5", "e+1", "\\n", "\\\"", "\\u00", "é", "中文", "😀", "  ", "\n  ", "int", " = ", "while",
                        "return ", "();", "+(", "\"a\"", "ab", "abc", "a\"", "\"\"", "12", "-0", "0.", "x ", "(1"})
    bytes.push_back(s);
  std::mt19937 rng(seed);
  const std::string alphabet = "{}[]\":, abce0123456789.-+\\n\t()*/=<;xyz";
  for (size_t i = 0; i < n_random; ++i) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 7);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    bytes.push_back(s);
  }
  bytes.push_back("\xe4\xb8");  // a partial UTF-8 sequence as its own token
  bytes.push_back("\xad");
  return std::make_shared<TokenVocabulary>(
      bytes, std::vector<std::pair<std::string, int32_t>>{{"<|tool_call_start|>", kCallStart},
                                                          {"<|tool_call_end|>", kCallEnd}});
}

bool bit(const std::vector<uint64_t>& m, int32_t id) { return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }

// Walks random allowed tokens, checking every step's mask token by token against the
// brute-force rule; steps back now and then (rollback) and checks the mask again.
void random_walks(const std::string& gbnf, int walks, int steps, uint32_t seed) {
  auto g = parse_gbnf(gbnf);
  auto vocab = test_vocab(seed, 600);
  auto tg = std::make_shared<TokenGrammar>(g, vocab);
  std::mt19937 rng(seed);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(tg, {kEos});
    std::vector<std::string> texts = {""};
    std::vector<uint64_t> mask(static_cast<size_t>(m.mask_words()));
    for (int s = 0; s < steps; ++s) {
      m.fill_mask(mask.data());
      const std::string& text = texts.back();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        bool expect;
        if (id == kEos)
          expect = grammar_accepts(*g, text);
        else if (vocab->bytes(id).empty())
          expect = false;
        else
          expect = grammar_accepts_prefix(*g, text + vocab->bytes(id));
        ASSERT_EQ(bit(mask, id), expect) << "token '" << vocab->bytes(id) << "' after '" << text << "'";
        ASSERT_EQ(m.allows(id), expect);
        if (expect) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      // Prefer ending late: the walk explores deep states.
      int32_t pick = allowed[rng() % allowed.size()];
      if (pick == kEos && allowed.size() > 1 && rng() % 4) pick = allowed[(rng() % (allowed.size() - 1)) + 1];
      ASSERT_TRUE(m.accept(pick));
      if (pick == kEos) {
        EXPECT_TRUE(m.finished());
        break;
      }
      texts.push_back(text + vocab->bytes(pick));
      if (s % 5 == 4 && m.accepted() >= 2) {
        m.rollback(2);
        texts.resize(texts.size() - 2);
      }
    }
  }
}

TEST(GrammarMatcher, JsonMasksEqualBruteForce) { random_walks(testing_grammars::kJson, 6, 30, 1); }
TEST(GrammarMatcher, ArithmeticMasksEqualBruteForce) { random_walks(testing_grammars::kArithmetic, 6, 25, 2); }
TEST(GrammarMatcher, CLikeMasksEqualBruteForce) { random_walks(testing_grammars::kCLike, 4, 30, 3); }
TEST(GrammarMatcher, BoundedRepetitionMasksEqualBruteForce) {
  random_walks("root ::= \"\\\"\" [a-c0-9]{2,9} \"\\\"\" ([,:] [0-9]{0,3}){0,4}", 8, 16, 4);
}
TEST(GrammarMatcher, UnicodeClassMasksEqualBruteForce) {
  random_walks("root ::= [^\"\\\\\\x00-\\x1F]{1,6} \"\\\"\" (\"中\" | [é-ÿ])*", 8, 12, 5);
}

TEST(GrammarMatcher, SpecialTokensOnlyMatchThemselves) {
  auto g = parse_gbnf("root ::= <|tool_call_start|> \"[f(\" [a-z]+ \")]\" <|tool_call_end|>");
  auto vocab = test_vocab(9, 0);
  auto tg = std::make_shared<TokenGrammar>(g, vocab);
  GrammarMatcher m(tg, {kEos});
  std::vector<uint64_t> mask(static_cast<size_t>(m.mask_words()));
  m.fill_mask(mask.data());
  for (int32_t id = 0; id < vocab->size(); ++id) EXPECT_EQ(bit(mask, id), id == kCallStart) << id;
  ASSERT_TRUE(m.accept(kCallStart));
  for (const char* piece : {"[", "f", "(", "x", ")", "]"}) {
    int32_t id = -1;
    for (int32_t k = 0; k < vocab->size(); ++k)
      if (vocab->bytes(k) == piece) id = k;
    ASSERT_TRUE(m.accept(id)) << piece;
  }
  EXPECT_FALSE(m.can_end());
  m.fill_mask(mask.data());
  EXPECT_TRUE(bit(mask, kCallEnd));
  EXPECT_FALSE(bit(mask, kEos));
  ASSERT_TRUE(m.accept(kCallEnd));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.finished());  // nothing can follow
  m.fill_mask(mask.data());
  for (int32_t id = 0; id < vocab->size(); ++id) EXPECT_EQ(bit(mask, id), id == kEos) << id;
  EXPECT_FALSE(m.accept(kCallStart));
  EXPECT_THROW(TokenGrammar(parse_gbnf("root ::= <|nope|>"), vocab), Error);
}

TEST(GrammarMatcher, ForcedBytesAndRollback) {
  auto g = parse_gbnf("root ::= \"{\\\"name\\\": \" ( \"1\" | \"2\" ) \"}\"");
  auto vocab = test_vocab(9, 0);
  auto tg = std::make_shared<TokenGrammar>(g, vocab);
  GrammarMatcher m(tg, {kEos});
  EXPECT_EQ(m.forced_bytes(100), "{\"name\": ");
  EXPECT_EQ(m.forced_bytes(3), "{\"n");
  for (char c : std::string("{\"na")) ASSERT_TRUE(m.accept(static_cast<uint8_t>(c) + 2));
  EXPECT_EQ(m.forced_bytes(100), "me\": ");
  EXPECT_FALSE(m.accept('x' + 2));
  m.rollback(3);
  EXPECT_EQ(m.accepted(), 1u);
  EXPECT_EQ(m.forced_bytes(100), "\"name\": ");
  EXPECT_THROW(m.rollback(2), Error);
}

TEST(GrammarMatcher, MaskCacheIsSharedAndComplete) {
  auto vocab = test_vocab(3, 300);
  auto tg = std::make_shared<TokenGrammar>(parse_gbnf(testing_grammars::kJson), vocab);
  tg->precompute_all();
  const size_t n = tg->cached_positions();
  EXPECT_GT(n, 10u);
  GrammarMatcher m(tg, {kEos});
  std::vector<uint64_t> mask(static_cast<size_t>(m.mask_words()));
  m.fill_mask(mask.data());
  EXPECT_EQ(tg->cached_positions(), n);
}

}  // namespace
}  // namespace lfm::grammar
