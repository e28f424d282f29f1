// Helpers for the front ends that write GBNF text (json_schema.h, regex_to_gbnf.h): quoting
// literals and character classes, and a rule set that names rules uniquely.
//
// Everything written is ASCII: code points outside printable ASCII are written as \xHH, \uHHHH or
// \UHHHHHHHH escapes, so a grammar prints and diffs cleanly whatever the schema contains.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lfm::grammar {

// A GBNF "literal" matching the UTF-8 text `utf8` exactly (which must be valid UTF-8).
std::string gbnf_literal(std::string_view utf8);

// One code point as it may appear inside a GBNF literal or [class] (escaped where needed).
std::string gbnf_char(char32_t cp, bool in_class);

// A set of code points as sorted, disjoint, non-adjacent inclusive ranges.
using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;
constexpr char32_t kMaxCodePoint = 0x10FFFF;

CodeRanges normalize_ranges(CodeRanges r);
// Every scalar value (surrogates excluded) not in `r`.
CodeRanges complement_ranges(const CodeRanges& r);
CodeRanges subtract_ranges(const CodeRanges& a, const CodeRanges& b);
CodeRanges intersect_ranges(const CodeRanges& a, const CodeRanges& b);

// A GBNF [class] for the set (written negated when that is shorter); "" when the set is empty.
std::string gbnf_class(const CodeRanges& r);

// Named rules of a grammar under construction. Names are [a-zA-Z0-9-] (generated helper rules of
// the GBNF parser use '_', so ours never collide with them).
class RuleSet {
 public:
  // Adds a rule; returns the name used. A rule with the same body under the same base name is
  // reused; a different body gets the base name with a numeric suffix.
  std::string add(std::string_view base, const std::string& body);
  // Reserves a unique name for a rule whose body comes later (recursive references), then sets it.
  std::string reserve(std::string_view base);
  void set(const std::string& name, const std::string& body);
  bool has(const std::string& name) const { return bodies_.count(name) != 0; }
  // Total size of the bodies so far (callers cap it).
  size_t text_size() const { return size_; }
  // All rules, `root` first when present, then in creation order.
  std::string text() const;

 private:
  std::string unique(std::string_view base);
  std::map<std::string, std::string> bodies_;
  // Indexes that keep add() and unique() logarithmic (a scan over name-1, name-2, ... per call
  // made a schema with many same-named rules quadratic): (base, body) → the rule reused for
  // them; base → the next numeric suffix to try.
  std::map<std::pair<std::string, std::string>, std::string> by_body_;
  std::map<std::string, int> next_suffix_;
  std::map<std::string, std::string> reserved_base_;  // reserved name → its base, until set
  std::vector<std::string> order_;
  size_t size_ = 0;
};

// The body of a rule for one character of a JSON string's text: any character but `"`, `\` and
// the controls below U+0020, or one of JSON's escapes (\" \\ \/ \b \f \n \r \t \uXXXX).
std::string json_char_body();

class RuleSet;
// The contents of a JSON string (between the quotes) other than the given texts, as written
// literally; names containing characters JSON escapes are skipped (their escaped spelling is not
// excluded). Helper rules go into `rules`, named after `name`; returns a rule name.
std::string json_string_content_except(const std::vector<std::string>& names, RuleSet& rules, std::string_view name);

// Turns any text into a rule name fragment ([a-zA-Z0-9-], never empty).
std::string sanitize_rule_name(std::string_view s);

}  // namespace lfm::grammar
