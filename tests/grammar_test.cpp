// GBNF parsing and whole-text matching (grammar/grammar.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include "std_regex.h"
#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/gbnf_compose.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex_to_gbnf.h"
#include "grammar/work_budget.h"
#include "grammar_test_util.h"
#include "test_util.h"

namespace lfm::grammar {
namespace {

bool accepts(const std::string& gbnf, const std::string& text) { return grammar_accepts(*parse_gbnf(gbnf), text); }

std::string error_of(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarParse, JsonGrammarAcceptsJsonAndRejectsTheRest) {
  auto g = parse_gbnf(testing_grammars::kJson);
  for (const char* ok : {R"({"a": [1, 2.5e3, -0.1], "b": {"c": null}, "d": "x\"y\u00e9"})", "[]", "  true  ",
                         R"("\u00e9\n")", "-12", R"({"k":"ü中😀"})"})
    EXPECT_TRUE(grammar_accepts(*g, ok)) << ok;
  for (const char* bad : {R"({"a" 1})", "[1,]", "01", "tru", R"({"a":1,})", "\"\x01\"", "nul"})
    EXPECT_FALSE(grammar_accepts(*g, bad)) << bad;
  EXPECT_TRUE(grammar_accepts_prefix(*g, R"({"a": [1, 2)"));
  EXPECT_FALSE(grammar_accepts_prefix(*g, R"({"a": ])"));
}

TEST(GrammarParse, ArithmeticAndCLikeGrammars) {
  auto arith = parse_gbnf(testing_grammars::kArithmetic);
  EXPECT_TRUE(grammar_accepts(*arith, "(1+2)*3-4/5"));
  EXPECT_TRUE(grammar_accepts(*arith, "x"));
  EXPECT_FALSE(grammar_accepts(*arith, "(1+2"));
  EXPECT_FALSE(grammar_accepts(*arith, "1++2"));
  auto c = parse_gbnf(testing_grammars::kCLike);
  EXPECT_TRUE(grammar_accepts(*c, "int main() {\n  int x = 1;\n  while (x < 10) { x = x + 1; }\n  return x;\n}\n"));
  EXPECT_FALSE(grammar_accepts(*c, "int main() { return; "));
}

TEST(GrammarParse, RepetitionBoundsAreExact) {
  const std::string g = "root ::= \"a\"{2,4} \"b\"{3} [0-9]{1,} \"c\"?";
  EXPECT_FALSE(accepts(g, "abbb1"));
  EXPECT_TRUE(accepts(g, "aabbb1"));
  EXPECT_TRUE(accepts(g, "aaaabbb12c"));
  EXPECT_FALSE(accepts(g, "aaaaabbb1"));
  EXPECT_FALSE(accepts(g, "aabb1"));
  EXPECT_FALSE(accepts(g, "aabbb"));
  EXPECT_TRUE(accepts("root ::= (\"ab\" | \"c\")* \"!\"", "abcab!"));
  EXPECT_TRUE(accepts("root ::= \"xy\"+", "xyxy"));
  EXPECT_FALSE(accepts("root ::= \"xy\"+", "xyx"));
  EXPECT_TRUE(accepts("root ::= ([a-c]{2})+", "abca"));
  EXPECT_FALSE(accepts("root ::= ([a-c]{2})+", "abc"));
}

TEST(GrammarParse, CodePointClassesMatchUtf8) {
  const std::string g = "root ::= [^\"\\\\]* \".\" . [α-ω]";
  EXPECT_TRUE(accepts(g, "héllo 中文 😀.😀β"));
  EXPECT_FALSE(accepts(g, "a\"b.xβ"));
  EXPECT_FALSE(accepts(g, "ab.xb"));
  // Bytes that are not UTF-8 never match a class or `.`.
  EXPECT_FALSE(accepts("root ::= .", "\xff"));
  EXPECT_FALSE(accepts("root ::= .", "\xed\xa0\x80"));  // a surrogate
  EXPECT_TRUE(accepts("root ::= [\\x00-\\U0010FFFF]", "\xf4\x8f\xbf\xbf"));
  EXPECT_TRUE(accepts("root ::= \"\\u00e9\\x41\\n\"", "éA\n"));
}

// Every code point class agrees with a direct membership test, on code points around each
// UTF-8 length boundary and at random.
TEST(GrammarParse, RandomClassesAgreeWithMembership) {
  std::mt19937 rng(7);
  std::vector<char32_t> probes = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x3FFFF,
                                  0x40000, 0x10FFFF};
  for (int i = 0; i < 60; ++i) probes.push_back(std::uniform_int_distribution<uint32_t>(0, 0x10FFFF)(rng));
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::pair<char32_t, char32_t>> ranges;
    std::string cls = "root ::= [";
    const bool negate = trial % 2;
    if (negate) cls += '^';
    for (int k = 0; k < 3; ++k) {
      char32_t a = std::uniform_int_distribution<uint32_t>(0, 0x10FFFF)(rng) >> (rng() % 12);
      char32_t b = a + (std::uniform_int_distribution<uint32_t>(0, 0x10FFFF)(rng) >> (rng() % 16));
      b = std::min<char32_t>(b, 0x10FFFF);
      if (a >= 0xD800 && a <= 0xDFFF) a = 0xE000;
      if (b >= 0xD800 && b <= 0xDFFF) b = 0xE000;
      if (b < a) std::swap(a, b);
      ranges.push_back({a, b});
      char buf[32];
      std::snprintf(buf, sizeof buf, "\\U%08X-\\U%08X", static_cast<unsigned>(a), static_cast<unsigned>(b));
      cls += buf;
    }
    cls += "]";
    auto g = parse_gbnf(cls);
    for (char32_t cp : probes) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      bool in = false;
      for (auto [a, b] : ranges) in |= (cp >= a && cp <= b);
      if (negate) in = !in;
      std::string text;
      append_utf8(text, cp);
      EXPECT_EQ(grammar_accepts(*g, text), in) << cls << " U+" << std::hex << static_cast<uint32_t>(cp);
    }
  }
}

TEST(GrammarParse, LayoutCommentsAndContinuationLines) {
  const std::string g =
      "# a comment\n"
      "root ::=\n"
      "  item   # trailing comment\n"
      "  | \"z\"\n"
      "item ::= ( \"a\"\n"
      "   \"b\" )\n";
  EXPECT_TRUE(accepts(g, "ab"));
  EXPECT_TRUE(accepts(g, "z"));
  EXPECT_FALSE(accepts(g, "a"));
  EXPECT_TRUE(accepts("root ::= \"a\" b\nb ::= \"b\"", "ab"));
}

TEST(GrammarParse, SpecialTokensAreElementsOfTheirOwn) {
  auto g = parse_gbnf("root ::= <|tool_call_start|> \"[\" [a-z]+ \"]\" <|tool_call_end|>");
  ASSERT_EQ(g->token_texts.size(), 2u);
  EXPECT_EQ(g->token_texts[0], "<|tool_call_start|>");
  // As bytes the marker text does not match: only the token does.
  EXPECT_FALSE(grammar_accepts(*g, "<|tool_call_start|>[f]<|tool_call_end|>"));
}

TEST(GrammarParse, ErrorsNameTheProblemAndPlace) {
  std::string e = error_of("root ::= \"a\" b");
  EXPECT_NE(e.find("rule 'b' is used but never defined"), std::string::npos) << e;
  e = error_of("root ::= a\na ::= a \"x\" | \"y\"");
  EXPECT_NE(e.find("left-recursive"), std::string::npos) << e;
  e = error_of("root ::= b \"x\"\nb ::= c\nc ::= \"\" | b");
  EXPECT_NE(e.find("left-recursive"), std::string::npos) << e;
  e = error_of("root ::= (\"\")*");
  EXPECT_NE(e.find("left-recursive"), std::string::npos) << e;
  e = error_of("root ::= \"a\"\n\nfoo ::= [a-");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  e = error_of("start ::= \"a\"");
  EXPECT_NE(e.find("no rule named 'root'"), std::string::npos) << e;
  e = error_of("root ::= \"a\"{3,2}");
  EXPECT_NE(e.find("max below min"), std::string::npos) << e;
  e = error_of("root ::= \"a\"{0,999999}");
  EXPECT_NE(e.find("above the limit"), std::string::npos) << e;
  e = error_of("root ::= \"\\q\"");
  EXPECT_NE(e.find("unknown escape"), std::string::npos) << e;
  e = error_of("root ::= \"a\"\nroot ::= \"b\"");
  EXPECT_NE(e.find("defined twice"), std::string::npos) << e;
  e = error_of("root ::= [z-a]");
  EXPECT_NE(e.find("out of order"), std::string::npos) << e;
  e = error_of("root ::= \"\xff\"");
  EXPECT_NE(e.find("not valid UTF-8"), std::string::npos) << e;
}

// A grammar written as a regular expression over a small alphabet agrees with std::regex on
// every string up to length 6.
TEST(GrammarParse, AgreesWithStdRegexOnAllShortStrings) {
  struct Case {
    const char* gbnf;
    const char* re;
  } cases[] = {
      {"root ::= (\"a\" | \"b\" \"c\")* \"c\"?", "(a|bc)*c?"},
      {"root ::= \"a\"{1,2} (\"b\"{0,2} \"c\")+", "a{1,2}(b{0,2}c)+"},
      {"root ::= ([ab] [bc]?)* | \"ccc\"", "([ab][bc]?)*|ccc"},
  };
  for (const auto& c : cases) {
    auto g = parse_gbnf(c.gbnf);
    std::regex re(c.re);
    std::string s;
    std::function<void(int)> all = [&](int left) {
      EXPECT_EQ(grammar_accepts(*g, s), std::regex_match(s, re)) << c.gbnf << " on '" << s << "'";
      if (!left) return;
      for (char ch : {'a', 'b', 'c'}) {
        s.push_back(ch);
        all(left - 1);
        s.pop_back();
      }
    };
    all(6);
  }
}

}  // namespace
}  // namespace lfm::grammar

namespace lfm::grammar {
namespace {

TEST(GrammarParse, TokenReferencesByText) {
  auto g = parse_gbnf("root ::= <think> [a-z]* </think> \"x\" <|im_end|>");
  ASSERT_EQ(g->token_texts.size(), 3u);
  EXPECT_EQ(g->token_texts[0], "<think>");
  EXPECT_EQ(g->token_texts[1], "</think>");
  EXPECT_EQ(g->token_texts[2], "<|im_end|>");
  std::string e;
  try {
    parse_gbnf("root ::= <think");
  } catch (const Error& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("unterminated token reference"), std::string::npos) << e;
  try {
    parse_gbnf("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')'));
    e.clear();
  } catch (const Error& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("nested deeper"), std::string::npos) << e;
}

// A long chain of rules (each the next's only reference) is checked without deep recursion; a
// state past the matcher's bound is an error, not a step that never ends.
TEST(GrammarParse, LongRuleChainsAndTheStateBound) {
  auto chain = [](int n) {
    std::string g = "root ::= r0\n";
    for (int i = 0; i < n; ++i) g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " | \"a\"\n";
    return g + "r" + std::to_string(n) + " ::= \"b\"\n";
  };
  auto parsed = parse_gbnf(chain(20000));
  EXPECT_TRUE(grammar_accepts(*parsed, "a"));
  EXPECT_TRUE(grammar_accepts(*parsed, "b"));
  EXPECT_FALSE(grammar_accepts(*parsed, "c"));
  // The left-recursion check walks 200,000 rules (~80 MB of grammar: more than the default
  // compile budget, grammar/work_budget.h, allows a request).
  WorkBudget roomy(BudgetLimits{BudgetLimits{}.steps, uint64_t{256} << 20});
  auto huge = parse_gbnf(chain(200000), "root", &roomy);
  try {
    grammar_accepts(*huge, "a");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
  // Nested repetition is folded, so it stays cheap: (a+)+b on 60 a's.
  auto nested = parse_gbnf("root ::= ((\"a\"+)+)+ \"b\" | ((\"c\"*)*)*");
  EXPECT_TRUE(grammar_accepts(*nested, std::string(60, 'a') + "b"));
  EXPECT_FALSE(grammar_accepts(*nested, std::string(60, 'a')));
  EXPECT_TRUE(grammar_accepts(*nested, std::string(60, 'c')));
  EXPECT_TRUE(grammar_accepts(*nested, ""));
}

TEST(GbnfCompose, PrefixRenamesRulesOnly) {
  const std::string g = "root ::= item{2,3} \"root item\" [a-z_-] <|tool_call_start|> <think> # root comment\nitem ::= \"\\\"\" ws\nws ::= [ ]?\n";
  const std::string p = prefix_gbnf_rules(g, "t0-");
  EXPECT_EQ(p, "t0-root ::= t0-item{2,3} \"root item\" [a-z_-] <|tool_call_start|> <think> # root comment\n"
               "t0-item ::= \"\\\"\" t0-ws\nt0-ws ::= [ ]?\n");
  auto parsed = parse_gbnf(p + "root ::= t0-root\n");
  EXPECT_EQ(parsed->token_texts.size(), 2u);
}

}  // namespace
}  // namespace lfm::grammar

namespace lfm::grammar {
namespace {

// Every input in fuzz/regressions/grammar (each once made fuzz_grammar time out: a kind byte, 0
// GBNF, 1 JSON schema, 2 regex, then the text) compiles or is refused, and matching text against
// it finishes (within the state bounds) instead of hanging.
TEST(FuzzRegressions, GrammarInputs) {
  const std::filesystem::path dir = std::filesystem::path(LFM_SOURCE_DIR) / "fuzz/regressions/grammar";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty()) continue;
    ++n;
    const std::string text = bytes.substr(1);
    try {
      std::shared_ptr<const Grammar> g;
      if (bytes[0] % 3 == 0) g = parse_gbnf(text);
      else if (bytes[0] % 3 == 1) g = parse_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(text)));
      else g = parse_gbnf(regex_to_gbnf(text));
      for (const std::string& probe : {std::string(80, 'a'), std::string(80, '+') + "le", std::string("org.le")})
        (void)grammar_accepts_prefix(*g, probe);
    } catch (const Error&) {
    } catch (const nlohmann::json::exception&) {
    }
  }
  EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace lfm::grammar
