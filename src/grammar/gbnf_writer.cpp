#include "grammar/gbnf_writer.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/utf8.h"

namespace lfm::grammar {

namespace {

std::string hex_escape(char32_t cp) {
  char buf[16];
  if (cp < 0x80) std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(cp));
  else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
  else std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(cp));
  return buf;
}

bool is_alnum(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

}  // namespace

std::string gbnf_char(char32_t cp, bool in_class) {
  if (in_class) {
    // Inside [...] only letters, digits and a few harmless marks stay bare: ] \ - ^ [ all have
    // meanings there, and a hex escape is read the same by every GBNF parser.
    if (is_alnum(cp) || cp == ' ' || cp == '_' || cp == '.' || cp == ',' || cp == ':' || cp == '@')
      return std::string(1, static_cast<char>(cp));
    return hex_escape(cp);
  }
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp >= 0x20 && cp < 0x7F) return std::string(1, static_cast<char>(cp));
  return hex_escape(cp);
}

std::string gbnf_literal(std::string_view utf8) {
  LFM_CHECK(find_invalid_utf8(utf8) == std::string_view::npos, "grammar: literal is not valid UTF-8");
  std::string out = "\"";
  for (size_t i = 0; i < utf8.size();) out += gbnf_char(next_code_point(utf8, i), false);
  return out + "\"";
}

CodeRanges normalize_ranges(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (auto [lo, hi] : r) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.emplace_back(lo, hi);
  }
  return out;
}

CodeRanges complement_ranges(const CodeRanges& r) {
  CodeRanges in = normalize_ranges(r);
  in.emplace_back(0xD800, 0xDFFF);  // surrogates are never characters
  in = normalize_ranges(in);
  CodeRanges out;
  char32_t next = 0;
  for (auto [lo, hi] : in) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

CodeRanges intersect_ranges(const CodeRanges& a, const CodeRanges& b) {
  CodeRanges out;
  for (auto [alo, ahi] : a)
    for (auto [blo, bhi] : b) {
      const char32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  return normalize_ranges(out);
}

CodeRanges subtract_ranges(const CodeRanges& a, const CodeRanges& b) {
  return intersect_ranges(a, complement_ranges(b));
}

std::string gbnf_class(const CodeRanges& ranges) {
  const CodeRanges r = normalize_ranges(ranges);
  if (r.empty()) return "";
  auto body = [](const CodeRanges& set) {
    std::string s;
    for (auto [lo, hi] : set) {
      s += gbnf_char(lo, true);
      if (hi > lo) s += (hi == lo + 1 ? "" : "-") + gbnf_char(hi, true);
    }
    return s;
  };
  // A set reaching the top code point is the complement of something small: [^"\\] rather than
  // a dozen ranges up to \U0010FFFF.
  if (r.back().second == kMaxCodePoint) {
    CodeRanges c = complement_ranges(r);
    if (c.empty()) return ".";  // every character
    return "[^" + body(c) + "]";
  }
  return "[" + body(r) + "]";
}

std::string json_char_body() {
  // Any character but the quote, the backslash and controls (JSON forbids them raw), or an escape.
  return gbnf_class(complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})) +
         " | \"\\\\\" ([\\x22\\x5C/bfnrt] | \"u\" [0-9a-fA-F]{4})";
}

std::string json_string_content_except(const std::vector<std::string>& names, RuleSet& rules, std::string_view name) {
  // A trie of the names over code points; at each node: stop (unless a name ends there), a
  // child's character then that child, or any other character then anything.
  struct Node {
    std::map<char32_t, int> kids;
    bool end = false;
  };
  std::vector<Node> trie(1);
  const CodeRanges escaped = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  for (const auto& n : names) {
    if (find_invalid_utf8(n) != std::string_view::npos) continue;
    std::vector<char32_t> cps;
    bool plain = true;
    for (size_t i = 0; i < n.size();) {
      const char32_t c = next_code_point(n, i);
      plain = plain && !(c < 0x20 || c == '"' || c == '\\');
      cps.push_back(c);
    }
    if (!plain) continue;
    size_t at = 0;
    for (char32_t c : cps) {
      auto it = trie[at].kids.find(c);
      if (it == trie[at].kids.end()) {
        trie[at].kids[c] = static_cast<int>(trie.size());
        trie.emplace_back();
        at = trie.size() - 1;
      } else {
        at = static_cast<size_t>(it->second);
      }
    }
    trie[at].end = true;
  }
  const std::string any = rules.add("char", json_char_body());
  const std::string escape = "\"\\\\\" ([\\x22\\x5C/bfnrt] | \"u\" [0-9a-fA-F]{4})";
  std::vector<std::string> rule(trie.size());
  for (size_t i = trie.size(); i-- > 0;) {  // children have larger indices than their parents
    CodeRanges excluded = escaped;
    std::string alts;
    for (auto [c, k] : trie[i].kids) {
      excluded.emplace_back(c, c);
      std::string text;
      append_utf8(text, c);
      alts += (alts.empty() ? "" : " | ") + gbnf_literal(text) + " " + rule[static_cast<size_t>(k)];
    }
    alts += (alts.empty() ? "(" : " | (") + gbnf_class(complement_ranges(excluded)) + " | " + escape + ") " + any + "*";
    rule[i] = rules.add(std::string(name) + std::to_string(i), trie[i].end ? alts : "(" + alts + ")?");
  }
  return rule[0];
}

std::string sanitize_rule_name(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (is_alnum(static_cast<unsigned char>(c))) out += c;
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "r" : out;
}

std::string RuleSet::unique(std::string_view base) {
  std::string name = sanitize_rule_name(base);
  if (!bodies_.count(name)) return name;
  // Names are never removed: the suffixes below the last one handed out are all taken.
  int& i = next_suffix_[name];
  for (;;) {
    std::string n = name + "-" + std::to_string(++i);
    if (!bodies_.count(n)) return n;
  }
}

std::string RuleSet::add(std::string_view base, const std::string& body) {
  const std::string b = sanitize_rule_name(base);
  // Same base, same body: reuse (the primitive rules are requested many times).
  if (auto it = by_body_.find({b, body}); it != by_body_.end()) return it->second;
  const std::string name = unique(b);
  bodies_[name] = body;
  by_body_.emplace(std::make_pair(b, body), name);
  order_.push_back(name);
  size_ += name.size() + body.size() + 6;
  return name;
}

std::string RuleSet::reserve(std::string_view base) {
  const std::string name = unique(base);
  bodies_[name] = "";
  reserved_base_[name] = sanitize_rule_name(base);
  order_.push_back(name);
  return name;
}

void RuleSet::set(const std::string& name, const std::string& body) {
  auto it = bodies_.find(name);
  LFM_CHECK(it != bodies_.end(), "grammar: rule ", name, " was not reserved");
  it->second = body;
  if (auto r = reserved_base_.find(name); r != reserved_base_.end()) {
    by_body_.emplace(std::make_pair(r->second, body), name);
    reserved_base_.erase(r);
  }
  size_ += name.size() + body.size() + 6;
}

std::string RuleSet::text() const {
  std::string out;
  auto emit = [&](const std::string& n) { out += n + " ::= " + bodies_.at(n) + "\n"; };
  if (bodies_.count("root")) emit("root");
  for (const auto& n : order_)
    if (n != "root") emit(n);
  return out;
}

}  // namespace lfm::grammar
