// Building a Grammar (grammar/grammar.h) rule by rule: code point classes compiled to UTF-8 byte
// sequences, repetition expanded into right-recursive helper rules, and the checks that make a
// grammar safe for the stack matcher (every rule defined, no left recursion). Internal to
// grammar/ (the GBNF parser uses it).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/work_budget.h"

namespace lfm::grammar {

// Closed code point ranges [first, second].
using CodePointRanges = std::vector<std::pair<char32_t, char32_t>>;

// Sorted, merged, surrogates removed; `negate` complements over U+0000..U+10FFFF.
CodePointRanges normalize_ranges(CodePointRanges r, bool negate);

// One alternative under construction.
using Sequence = std::vector<Element>;

class GrammarBuilder {
 public:
  // Grammars larger than this are refused (a {m,n} bound or a schema can ask for millions).
  static constexpr size_t kMaxElements = size_t{1} << 21;
  // What one rule and one element cost in memory while building and in the finished Grammar
  // (names, map nodes, vectors), charged to the budget before they are made.
  static constexpr uint64_t kRuleBytes = 256, kElementBytes = 2 * sizeof(Element);
  static constexpr uint64_t kRuleSteps = 160;  // a new rule's work in element steps (grammar_builder.cpp)

  // Work and memory are charged to `budget` as the grammar grows (null: a default WorkBudget).
  explicit GrammarBuilder(WorkBudget* budget = nullptr) : budget_(budget) {}

  // The rule's index, declaring it if new (a reference may come before the definition).
  int32_t rule(const std::string& name);
  // A fresh helper rule named base_N.
  int32_t helper_rule(const std::string& base);
  bool defined(int32_t rule) const { return defined_[rule]; }
  void define(int32_t rule, std::vector<Sequence> alts);

  Element byte_set(const ByteSet& s);
  Element token(const std::string& text);
  // Elements matching one code point of `ranges` (non-empty): a byte set when every range is
  // ASCII, else a helper rule with one alternative per UTF-8 byte-range sequence.
  Element code_points(const CodePointRanges& ranges, const std::string& base);
  // Appends the UTF-8 bytes of a literal code point.
  void append_code_point(Sequence& seq, char32_t cp);

  // x*, x+, x?, x{min,max} (max < 0: unbounded) of the single element x, as elements to splice.
  // A repetition of a repetition is folded ((x*)+ is x*, (x+)? is x*, ...): nested unbounded
  // repetition would otherwise let the same text match in exponentially many ways.
  Sequence repeat(const Element& x, int64_t min, int64_t max, const std::string& base);
  // One element for a sequence (a helper rule, remembered as x+ when the sequence is x x*).
  Element group(Sequence seq, const std::string& base);

  // Checks and freezes: throws lfm::Error for undefined rules (naming the first) and for left
  // recursion (also through rules that can match nothing).
  Grammar finish(const std::string& root);

 private:
  int32_t new_rule(const std::string& name);
  // Charges n more elements (before they are made); throws past kMaxElements or the budget.
  void count(size_t n);
  // A rule x_star ::= x x_star | "" with x's alternatives inlined when x is a small rule: the
  // repetition then stays in one stack frame, which the mask cache relies on.
  int32_t star_rule(const Element& x, const std::string& base);
  // Replaces references to small rules made of terminals only (a UTF-8 class, a group of
  // literals) by their alternatives, so that such a rule's end is not a frame boundary: the
  // mask cache sees a string's characters within one frame.
  void inline_leaf_rules();
  // Rules that can match the empty string.
  std::vector<bool> nullable_rules();

  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> alts_;
  std::vector<bool> defined_;
  std::map<std::string, int32_t> by_name_;
  std::map<std::string, int> helper_count_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, int32_t> set_index_;  // byte set bits → index in sets_
  std::vector<std::string> tokens_;
  std::map<std::string, int32_t> token_index_;
  std::map<std::pair<int64_t, int32_t>, int32_t> star_cache_;  // (element kind/index) → star rule
  std::map<int32_t, Element> star_of_, plus_of_;                 // rule → the x of x* / x+
  size_t elements_ = 0;
  BudgetRef budget_;
};

}  // namespace lfm::grammar
