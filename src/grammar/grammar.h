// A context-free grammar over bytes, compiled from llama.cpp's GBNF syntax, and whole-text
// matching. Token-level constrained decoding (grammar/grammar_matcher.h) runs on this form.
//
// GBNF as llama.cpp reads it: `name ::= alternatives` rules (names [a-zA-Z0-9_-]), "literals"
// with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes, [character classes] with ranges and ^
// negation, `.` (any code point), ( groups ), `|`, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}`,
// `#` comments. Literals and classes are Unicode code points, matched as their UTF-8 bytes. An
// extension: `<...>` outside quotes (`<|tool_call_start|>`, `<think>`) is the added token with
// that text, matched only by that token, never by ordinary tokens spelling it (and added tokens
// match nothing else).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lfm::grammar {

// One element of an alternative: a byte from a set, a rule reference, a special token, or the
// end of the alternative.
struct Element {
  enum class Kind : uint8_t { kBytes, kRule, kToken, kEnd };
  Kind kind = Kind::kEnd;
  int32_t index = -1;  // kBytes: byte set; kRule: rule; kToken: special token text (token_texts)
};

// 256-bit byte set.
struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

struct Grammar {
  // Every alternative's elements, each alternative ended by kEnd; an element's position in this
  // array is the grammar position a matcher's stack frame holds.
  std::vector<Element> elements;
  std::vector<std::vector<int32_t>> rule_alts;  // per rule: the first position of each alternative
  std::vector<std::string> rule_names;          // generated helper rules are named name_N
  std::vector<ByteSet> byte_sets;
  std::vector<std::string> token_texts;         // special tokens referenced as <|...|>
  int32_t root = 0;
};

class WorkBudget;

// Parses GBNF text; `root` names the start rule. Throws lfm::Error "grammar: line L, column C:
// <problem>" for syntax errors, undefined rules, left recursion (also through empty prefixes,
// e.g. ("")* ), and grammars too large: work and memory are charged to `budget` as the grammar
// is built (null: a default WorkBudget, grammar/work_budget.h), repetitions before expansion.
std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root = "root",
                                          WorkBudget* budget = nullptr);

// Whether the grammar derives exactly `text` (bytes; special tokens cannot occur in it).
bool grammar_accepts(const Grammar& g, std::string_view text);
// Whether `text` is a prefix of some string the grammar derives.
bool grammar_accepts_prefix(const Grammar& g, std::string_view text);

// The grammar back as GBNF-like text (helper rules included; byte sets printed as bytes), for
// error messages and debugging.
std::string to_gbnf(const Grammar& g);

}  // namespace lfm::grammar
