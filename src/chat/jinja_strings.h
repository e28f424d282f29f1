// Python string semantics on UTF-8 text, as Jinja templates see them through CPython:
// code-point indexing, str.strip/split/replace/..., repr(), float repr and json.dumps
// string escaping. Everything here must match CPython byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"  // append_utf8

namespace lfm::jinja {

// UTF-8 <-> code points. Invalid UTF-8 throws (the template engine only sees valid text).
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);  // number of code points

// str.isspace() for one code point (also what Python's regex \s matches).
bool py_isspace(char32_t c);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; sep == nullopt splits on whitespace runs. Empty sep throws.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines(keepends)
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0 replaces all.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// Substring search in linear time (Knuth-Morris-Pratt), charged to the work meter per byte read:
// std::string::find takes O(n*m) on text like 'a' * N searched for 'a' * M + 'b', which a
// template builds cheaply. Forward: the first match starting at or after `from`; reverse: the
// last match ending at or before `from`. npos when none.
class TextSearch {
 public:
  TextSearch(std::string_view needle, bool reverse);
  size_t find(std::string_view hay, size_t from) const;

 private:
  char at(size_t i) const { return rev_ ? needle_[needle_.size() - 1 - i] : needle_[i]; }
  std::string_view needle_;
  bool rev_;
  std::vector<size_t> fail_;
};
// Byte offset of the first (last, when reverse) occurrence of needle, or npos.
size_t text_find(std::string_view hay, std::string_view needle, bool reverse = false);
// str.find / rfind / count (code-point results).
int64_t py_find(std::string_view s, std::string_view sub, bool reverse);
int64_t py_count(std::string_view s, std::string_view sub);

// Case mapping. Exact for ASCII; other scripts use the C library's Unicode tables plus the
// few multi-character mappings CPython applies (documented limitation: rare special cases).
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_capitalize(std::string_view s);  // str.capitalize
std::string py_title(std::string_view s);       // str.title
std::string jinja_title(std::string_view s);    // Jinja's |title filter (word starts after -\s({[<)

// repr() of a str: quotes chosen and characters escaped exactly like CPython.
std::string py_repr_str(std::string_view s);
// repr() / str() of a float (shortest round-trip digits, CPython layout).
std::string py_float_repr(double d);
// json.dumps escaping of a string, including the surrounding quotes.
std::string json_quote(std::string_view s, bool ensure_ascii);

}  // namespace lfm::jinja
