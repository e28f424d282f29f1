// Parser for the body of an LFM2 tool-call block, i.e. the text between
// `<|tool_call_start|>` and `<|tool_call_end|>` (LFM2_SPEC.md §5.4–5.5).
//
// Accepted shapes (whitespace and newlines allowed between any two tokens):
//   * Pythonic list:  [get_weather(city="Paris", days=3), tools.search.web(q='x')]
//   * JSON list:      [{"name": "f", "arguments": {"a": 1}}]   ("parameters" is an alias of
//                     "arguments"; "arguments" may also be a JSON string holding the object;
//                     the OpenAI shape {"type": "function", "function": {...}} is unwrapped)
//   * The same items without the surrounding brackets (a single call or object, or several
//     separated by commas), and mixtures of calls and objects in one list.
//   * An empty list `[]` (zero calls).
//
// Argument values are Python literals, with JSON spellings accepted too:
//   strings ('…', "…", '''…''', """…""") with escapes \n \t \r \b \f \v \a \0-\7 (octal)
//   \\ \' \" \/ \xXX \uXXXX (surrogate pairs combined) \UXXXXXXXX and backslash-newline;
//   unknown escapes keep the backslash, as Python does; raw newlines inside any string are
//   accepted because models emit them in code arguments; prefixes r (raw), u and b.
//   ints (int64, then uint64, then double when they overflow), floats (sign, '.5', '5.',
//   exponent), True/False/None and true/false/null, lists, tuples (→ JSON arrays; `(x)` is
//   just x, `(x,)` a one-element array), dicts with quoted, numeric or bare-word keys,
//   trailing commas anywhere.
//   A call used as a value, e.g. f(when=date(year=2024)), becomes the object
//   {"name": "date", "arguments": {"year": 2024}} — structured rather than the call text, so a
//   tool receiving it can read it without a second parser.
//
// Positional arguments are mapped to "arg0", "arg1", … (by position); a positional argument
// after a keyword argument, and a repeated argument name, are rejected like Python does.
// Call names are identifiers joined by dots; '-' is also allowed after the first character
// because OpenAI function names may contain it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace lfm::chat {

struct ParsedToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // always an object, keys in the order they were written
};

// Nesting deeper than this (containers and calls) is rejected instead of recursing further,
// so hostile or degenerate model output cannot overflow the stack.
inline constexpr int kDefaultToolCallMaxDepth = 64;

// Parses one tool-call block body. Throws lfm::Error (with the byte offset) on malformed input.
std::vector<ParsedToolCall> parse_tool_call_block(std::string_view body, int max_depth = kDefaultToolCallMaxDepth);

}  // namespace lfm::chat
