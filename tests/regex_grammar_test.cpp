// Regular expressions → GBNF (grammar/regex_to_gbnf.h): a table of patterns with strings that
// match in full and strings that do not, checked on the grammar and cross-checked against
// std::regex (ECMAScript, regex_match); JSON-string contents for JSON Schema `pattern`.
#include <gtest/gtest.h>

#include <random>
#include "std_regex.h"
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/regex_to_gbnf.h"

namespace lfm::grammar {
namespace {

struct RegexCase {
  std::string pattern;
  std::vector<std::string> match, no_match;
};

const std::vector<RegexCase>& cases() {
  static const std::vector<RegexCase> c = {
      {"abc", {"abc"}, {"", "ab", "abcd", "xabc"}},
      {"", {""}, {"a"}},
      {"^$", {""}, {"a"}},
      {"^abc$", {"abc"}, {"abcc", "ab"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"[a-c]+x?", {"a", "abcx", "ccc"}, {"", "x", "abd", "axx"}},
      {"[^a-c]", {"d", "-", "Z", "\n"}, {"a", "b", "dd", ""}},
      {"\\d{3}-\\d{2,4}", {"123-45", "000-9999"}, {"12-45", "123-4", "123-45678", "abc-12"}},
      {"\\w+@\\w+\\.com", {"a_1@x.com"}, {"a@x.org", "@x.com", "a@x_com"}},
      {"\\s*x\\s*", {"x", "  x\t", "\nx"}, {"", "xx", " y "}},
      {"\\D\\W\\S", {"a a", "-!x"}, {"1 a", "a_a", "a  "}},
      {"(ab)*", {"", "ab", "abab"}, {"a", "aba"}},
      {"(?:ab|cd){2}", {"abcd", "cdcd", "abab"}, {"ab", "abcdab"}},
      {"(a*)*b", {"b", "aab", "ab"}, {"a", "ba"}},
      {"(a|b?)+c", {"c", "abc", "aabbc"}, {"ab", "cc"}},
      {"x{2,}", {"xx", "xxxxx"}, {"x", ""}},
      {"x{0,2}y", {"y", "xy", "xxy"}, {"xxxy"}},
      {"a+?b*?", {"a", "aab", "abbb"}, {"b", ""}},
      {"a.c", {"abc", "a.c", "a c"}, {"ac", "a\nc", "abbc"}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$\\/", {".*+?()[]{}|\\^$/"}, {"x"}},
      {"[\\d.-]+", {"1.5", "-3", "..."}, {"", "a"}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"[a-]", {"-", "a"}, {"b"}},
      {"[\\]\\\\]", {"]", "\\"}, {"a", "["}},
      {"\\x41\\u0042\\n\\t", {"AB\n\t"}, {"AB"}},
      {"[0-9]{4}-(0[1-9]|1[0-2])", {"2024-01", "1999-12"}, {"2024-13", "2024-00", "24-01"}},
      {"(\\+|-)?[1-9][0-9]*", {"7", "+10", "-900"}, {"0", "01", "+"}},
      {"([a-z]+\\.)*[a-z]+", {"a", "a.b.c"}, {"a.", ".a", "a..b"}},
      {"colou?r|grey|gray", {"color", "colour", "grey"}, {"colouur", "gr"}},
  };
  return c;
}

TEST(RegexGrammar, TableMatchesInFullLikeStdRegex) {
  for (const auto& c : cases()) {
    SCOPED_TRACE("pattern " + c.pattern);
    const std::string gbnf = regex_to_gbnf(c.pattern);
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = parse_gbnf(gbnf)) << gbnf;
    const std::regex re(c.pattern, std::regex::ECMAScript);
    for (const auto& s : c.match) {
      EXPECT_TRUE(grammar_accepts(*g, s)) << "should match: \"" << s << "\"\n" << gbnf;
      EXPECT_TRUE(std::regex_match(s, re)) << "the table is wrong: " << s;
    }
    for (const auto& s : c.no_match) {
      EXPECT_FALSE(grammar_accepts(*g, s)) << "should not match: \"" << s << "\"\n" << gbnf;
      EXPECT_FALSE(std::regex_match(s, re)) << "the table is wrong: " << s;
    }
  }
}

TEST(RegexGrammar, NonAsciiCharactersAreCodePoints) {
  auto g = parse_gbnf(regex_to_gbnf("é.[ü-ü]"));
  EXPECT_TRUE(grammar_accepts(*g, "é中ü"));
  EXPECT_FALSE(grammar_accepts(*g, "e中ü"));
  auto neg = parse_gbnf(regex_to_gbnf("[^a]"));
  EXPECT_TRUE(grammar_accepts(*neg, "😀"));
  EXPECT_FALSE(grammar_accepts(*neg, "😀😀"));
  auto pair = parse_gbnf(regex_to_gbnf("\\uD83D\\uDE00"));
  EXPECT_TRUE(grammar_accepts(*pair, "😀"));
  // A brace that does not form a quantifier is a literal (ECMAScript Annex B; std::regex refuses).
  auto brace = parse_gbnf(regex_to_gbnf("a{,2}"));
  EXPECT_TRUE(grammar_accepts(*brace, "a{,2}"));
  EXPECT_FALSE(grammar_accepts(*brace, "aa"));
}

TEST(RegexGrammar, UnsupportedConstructsNameThePosition) {
  struct Bad { const char* pattern; const char* message; };
  for (const Bad& b : std::vector<Bad>{{"(a)\\1", "regex: position 3: backreferences are not supported"},
                                        {"a(?=b)", "regex: position 2: lookahead is not supported"},
                                        {"(?<!a)b", "regex: position 1: lookbehind is not supported"},
                                        {"a\\bc", "regex: position 1: word boundary \\b is not supported"},
                                        {"a^b", "regex: position 1: anchors are supported only at the start and end"},
                                        {"(ab", "regex: position 0: unmatched ("},
                                        {"ab)", "regex: position 2: unmatched )"},
                                        {"*a", "regex: position 0: nothing to repeat"},
                                        {"[abc", "regex: position 0: unterminated ["},
                                        {"a{3,1}", "n < m"},
                                        {"\\p{L}", "Unicode property escapes"},
                                        {"a{100000}", "repetition count above"}}) {
    try {
      parse_gbnf(regex_to_gbnf(b.pattern));
      ADD_FAILURE() << b.pattern << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << b.pattern << ": " << e.what();
    }
  }
}

// The JSON Schema form: the contents of a JSON string, unanchored unless ^ / $ say otherwise, the
// characters written JSON-escaped.
std::shared_ptr<const Grammar> json_string_grammar(const std::string& pattern) {
  RuleSet rules;
  const std::string content = regex_json_string_content(pattern, rules, "pattern");
  rules.add("root", "\"\\\"\" " + content + " \"\\\"\"");
  return parse_gbnf(rules.text());
}

TEST(RegexGrammar, JsonSchemaPatternsAreUnanchoredUnlessAnchored) {
  auto g = json_string_grammar("ab+");
  for (const char* ok : {R"("ab")", R"("xxabbby")", R"("\"ab\n")", R"("\u0041ab")"}) EXPECT_TRUE(grammar_accepts(*g, ok)) << ok;
  for (const char* bad : {R"("a")", R"("ba")", "\"ab\n\"", R"(ab)"}) EXPECT_FALSE(grammar_accepts(*g, bad)) << bad;
  auto start = json_string_grammar("^ab");
  EXPECT_TRUE(grammar_accepts(*start, R"("abc")"));
  EXPECT_FALSE(grammar_accepts(*start, R"("cab")"));
  auto end = json_string_grammar("ab$");
  EXPECT_TRUE(grammar_accepts(*end, R"("cab")"));
  EXPECT_FALSE(grammar_accepts(*end, R"("abc")"));
  auto both = json_string_grammar("^a|b$");
  EXPECT_TRUE(grammar_accepts(*both, R"("axx")"));
  EXPECT_TRUE(grammar_accepts(*both, R"("xxb")"));
  EXPECT_FALSE(grammar_accepts(*both, R"("xax")"));
}

TEST(RegexGrammar, JsonSchemaPatternCharactersAreEscaped) {
  // A quote, a backslash and controls in the value appear escaped in the JSON text.
  auto g = json_string_grammar("^a\"b\\\\c\\n\\x01[\"\\t]$");
  EXPECT_TRUE(grammar_accepts(*g, R"("a\"b\\c\n\u0001\"")"));
  EXPECT_TRUE(grammar_accepts(*g, R"("a\"b\\c\n\u0001\t")"));
  EXPECT_FALSE(grammar_accepts(*g, "\"a\"b\\c\n\\u0001\t\""));
  EXPECT_FALSE(grammar_accepts(*g, R"("a"b\\c\n\u0001\t")"));
  // A negated class admits the quote (escaped) but never a raw one or a raw control.
  auto neg = json_string_grammar("^[^a]+$");
  EXPECT_TRUE(grammar_accepts(*neg, R"("\"\\\n\u001f")"));
  EXPECT_FALSE(grammar_accepts(*neg, R"("x"y")"));
  EXPECT_FALSE(grammar_accepts(*neg, "\"x\x01\""));
  EXPECT_FALSE(grammar_accepts(*neg, R"("xa")"));
}

// Random patterns over a small alphabet, random strings: the grammar agrees with std::regex, in
// full-match form (regex_match) and in the JSON Schema form (regex_search on the decoded value,
// the value written as nlohmann/json writes it).
std::string random_pattern(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::string out;
  const int atoms = 1 + pick(3);
  for (int i = 0; i < atoms; ++i) {
    std::string a;
    switch (depth < 2 ? pick(9) : pick(6)) {
      case 0: case 1: a = std::string(1, "ab\"\\\n"[pick(5)]); break;
      case 2: a = "[ab]"; break;
      case 3: a = "[^a]"; break;
      case 4: a = "."; break;
      case 5: a = "\\d"; break;
      case 6: case 7: a = "(" + random_pattern(rng, depth + 1) + ")"; break;
      default: a = "(?:" + random_pattern(rng, depth + 1) + "|" + random_pattern(rng, depth + 1) + ")"; break;
    }
    if (a == "\\") a = "\\\\";
    if (a == "\n") a = "\\n";
    static const char* quants[] = {"", "", "", "*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"};
    out += a + quants[pick(10)];
  }
  if (pick(4) == 0) out += "|" + random_pattern(rng, depth + 1);
  return out;
}

TEST(RegexGrammar, RandomPatternsAgreeWithStdRegex) {
  std::mt19937 rng(1234);
  const std::string alphabet = "ab1\"\\\n";
  int compared = 0;
  for (int p = 0; p < 250; ++p) {
    const std::string pattern = random_pattern(rng, 0);
    SCOPED_TRACE("pattern " + pattern);
    const std::regex re(pattern, std::regex::ECMAScript);
    auto full = parse_gbnf(regex_to_gbnf(pattern));
    RuleSet rules;
    rules.add("root", "\"\\\"\" " + regex_json_string_content(pattern, rules, "p") + " \"\\\"\"");
    auto in_json = parse_gbnf(rules.text());
    for (int k = 0; k < 40; ++k) {
      std::string s;
      for (int n = static_cast<int>(rng() % 6); n > 0; --n) s += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(grammar_accepts(*full, s), std::regex_match(s, re)) << "string " << nlohmann::json(s).dump();
      ASSERT_EQ(grammar_accepts(*in_json, nlohmann::json(s).dump()), std::regex_search(s, re))
          << "string " << nlohmann::json(s).dump();
      ++compared;
    }
  }
  EXPECT_EQ(compared, 250 * 40);
}

}  // namespace
}  // namespace lfm::grammar
