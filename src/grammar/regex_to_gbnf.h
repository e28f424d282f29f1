// Regular expressions → GBNF, for `lfm` regex constraints and JSON Schema `pattern`.
//
// The dialect is the ECMAScript subset that JSON Schema patterns use: literals; escapes \d \D \w
// \W \s \S (ECMAScript's definitions: \d and \w are ASCII, \s includes the Unicode spaces), \n \r
// \t \f \v \0 \xHH \uHHHH \cX and escaped punctuation; [classes] with ranges, negation and the
// escapes above (\b there is backspace); `.` (any character but \n \r U+2028 U+2029); groups
// ( ), (?: ), (?<name> ); `|`; quantifiers * + ? {m} {m,} {m,n}, lazy forms read as greedy (the
// set of matched strings is the same); ^ at the start and $ at the end of a top-level alternative.
// Not supported (lfm::Error "regex: position P: ..."): backreferences, lookahead and lookbehind,
// word boundaries \b \B, Unicode property escapes \p{..}, anchors anywhere else, flags.
// Matching is on characters (code points), as the pattern's own text is UTF-8.
#pragma once

#include <string>
#include <string_view>

#include "grammar/gbnf_writer.h"

namespace lfm::grammar {

// A whole grammar whose `root` derives exactly the strings the pattern matches in full (as
// std::regex_match would: a leading ^ and trailing $ change nothing).
// Work and memory are charged to `budget` (null: a default WorkBudget, grammar/work_budget.h).
class WorkBudget;
std::string regex_to_gbnf(std::string_view pattern, WorkBudget* budget = nullptr);

// The contents of a JSON string (between its quotes) whose decoded value contains a match of
// `pattern`, JSON Schema style: unanchored unless the alternative starts with ^ / ends with $.
// Characters the regex constrains are written in their canonical JSON form (`"` as \", `\` as
// \\, the controls as \n, \t, ... or \u00XX — what nlohmann/json and Python's json.dumps write),
// other characters (the unanchored padding) in any valid JSON form. Helper rules go into `rules`,
// named after `name`. Returns a GBNF expression.
std::string regex_json_string_content(std::string_view pattern, RuleSet& rules, std::string_view name,
                                      WorkBudget* budget = nullptr);

}  // namespace lfm::grammar
