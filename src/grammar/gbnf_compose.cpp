#include "grammar/gbnf_compose.h"

#include <cctype>

namespace lfm::grammar {

std::string prefix_gbnf_rules(std::string_view s, std::string_view prefix) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  size_t i = 0;
  // Copies a quoted or bracketed span, escapes included, up to its closing `close`.
  auto span = [&](char close) {
    out += s[i++];
    while (i < s.size() && s[i] != close) {
      if (s[i] == '\\' && i + 1 < s.size()) out += s[i++];
      out += s[i++];
    }
    if (i < s.size()) out += s[i++];
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      span('"');
    } else if (c == '[') {
      span(']');
    } else if (c == '{') {
      span('}');
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n') out += s[i++];
    } else if (c == '<') {
      const bool bars = i + 1 < s.size() && s[i + 1] == '|';
      const size_t end = bars ? s.find("|>", i + 2) : s.find('>', i + 1);
      const size_t stop = end == std::string_view::npos ? s.size() : end + (bars ? 2 : 1);
      out.append(s.substr(i, stop - i));
      i = stop;
    } else if (word(c)) {
      out += prefix;
      while (i < s.size() && word(s[i])) out += s[i++];
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace lfm::grammar
