// Python string semantics on UTF-8 text. See jinja_strings.h.
#include "chat/jinja_strings.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "chat/jinja_unicode_tables.h"
#include "chat/jinja_value.h"
#include "core/error.h"
#include "core/utf8.h"

namespace lfm::jinja {

// Scans charge the work meter per byte read (see WorkMeter): a step that reads a 60 MB string
// costs in proportion, even when it builds nothing (|length, startswith, in, find...). Decoding
// allocates four bytes per byte read and is charged so.
std::u32string utf8_decode(std::string_view s) {
  charge_work(sat_mul_add(s.size(), 4));
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    char32_t c;
    int n;
    if (b < 0x80) { c = b; n = 1; }
    else if ((b & 0xE0) == 0xC0) { c = b & 0x1F; n = 2; }
    else if ((b & 0xF0) == 0xE0) { c = b & 0x0F; n = 3; }
    else if ((b & 0xF8) == 0xF0) { c = b & 0x07; n = 4; }
    else fail("jinja: invalid UTF-8 byte 0x", std::hex, int(b), " in text");
    LFM_CHECK(i + n <= s.size(), "jinja: truncated UTF-8 sequence in text");
    for (int k = 1; k < n; ++k) {
      const auto cb = static_cast<unsigned char>(s[i + k]);
      LFM_CHECK((cb & 0xC0) == 0x80, "jinja: invalid UTF-8 continuation byte in text");
      c = (c << 6) | (cb & 0x3F);
    }
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  charge_work(s.size());
  size_t n = 0;
  for (char ch : s)
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++n;
  return n;
}

bool py_isspace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  std::sort(set.begin(), set.end());  // a lookup per character stays O(log) for a long `chars`
  auto strip_it = [&](char32_t c) { return chars ? std::binary_search(set.begin(), set.end(), c) : py_isspace(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

TextSearch::TextSearch(std::string_view needle, bool reverse) : needle_(needle), rev_(reverse), fail_(needle.size(), 0) {
  charge_work(sat_mul_add(needle.size(), sizeof(size_t)));
  for (size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k && at(i) != at(k)) k = fail_[k - 1];
    if (at(i) == at(k)) ++k;
    fail_[i] = k;
  }
}

size_t TextSearch::find(std::string_view hay, size_t from) const {
  const size_t m = needle_.size();
  if (from > hay.size()) return std::string_view::npos;
  if (m == 0) return from;
  size_t k = 0;
  if (!rev_) {
    for (size_t i = from; i < hay.size(); ++i) {
      while (k && hay[i] != at(k)) k = fail_[k - 1];
      if (hay[i] == at(k)) ++k;
      if (k == m) {
        charge_work(i + 1 - from);
        return i + 1 - m;
      }
    }
    charge_work(hay.size() - from);
    return std::string_view::npos;
  }
  for (size_t j = from; j-- > 0;) {
    while (k && hay[j] != at(k)) k = fail_[k - 1];
    if (hay[j] == at(k)) ++k;
    if (k == m) {
      charge_work(from - j);
      return j;
    }
  }
  charge_work(from);
  return std::string_view::npos;
}

size_t text_find(std::string_view hay, std::string_view needle, bool reverse) {
  return TextSearch(needle, reverse).find(hay, reverse ? hay.size() : 0);
}

namespace {

// Parts of split/rsplit/splitlines are charged as they are made: "a," * 30000000 splits into 30
// million strings, more than the list they end up in is checked for.
void add_part(std::vector<std::string>& out, std::string_view part) {
  charge_work(sizeof(std::string) + part.size());
  out.emplace_back(part);
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    LFM_CHECK(!sep->empty(), "jinja: str.split: empty separator");
    const TextSearch search(*sep, false);
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t f = search.find(s, pos);
      if (f == std::string_view::npos) break;
      add_part(out, s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    add_part(out, s.substr(pos));
    return out;
  }
  const std::u32string u = utf8_decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && py_isspace(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = u.size();
      while (e > i && py_isspace(u[e - 1])) --e;  // the remainder keeps inner but not trailing space
      add_part(out, utf8_encode(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !py_isspace(u[j])) ++j;
    add_part(out, utf8_encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  std::vector<std::string> out;
  if (sep) {
    LFM_CHECK(!sep->empty(), "jinja: str.rsplit: empty separator");
    const TextSearch search(*sep, true);
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t f = search.find(s, end);
      if (f == std::string_view::npos) break;
      add_part(out, s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    add_part(out, s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::u32string u = utf8_decode(s);
  size_t e = u.size();
  while (true) {
    while (e > 0 && py_isspace(u[e - 1])) --e;
    if (e == 0) break;
    if (static_cast<int64_t>(out.size()) == maxsplit) {
      size_t b = 0;
      while (b < e && py_isspace(u[b])) ++b;
      add_part(out, utf8_encode(std::u32string_view(u).substr(b, e - b)));
      break;
    }
    size_t j = e;
    while (j > 0 && !py_isspace(u[j - 1])) --j;
    add_part(out, utf8_encode(std::u32string_view(u).substr(j, e - j)));
    e = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  const std::u32string u = utf8_decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (!is_break(u[i])) { ++i; continue; }
    size_t eol = i + 1;
    if (u[i] == '\r' && eol < u.size() && u[eol] == '\n') ++eol;
    add_part(out, utf8_encode(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < u.size()) add_part(out, utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) { out += repl; ++done; }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  const TextSearch search(old, false);
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = search.find(s, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(repl);
    pos = f + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub, bool reverse) {
  const size_t f = text_find(s, sub, reverse);
  if (f == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, f)));
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  const TextSearch search(sub, false);
  int64_t n = 0;
  for (size_t pos = search.find(s, 0); pos != std::string_view::npos; pos = search.find(s, pos + sub.size())) ++n;
  return n;
}

// ---- case mapping (tables generated from CPython's unicodedata) ----

namespace {

const char* case_lookup(const tables::CaseEntry* t, size_t n, char32_t c) {
  const auto* end = t + n;
  const auto* it = std::lower_bound(t, end, c, [](const tables::CaseEntry& e, char32_t v) { return e.cp < v; });
  return (it != end && it->cp == c) ? it->utf8 : nullptr;
}

bool in_ranges(const tables::CodeRange* t, size_t n, char32_t c) {
  const auto* end = t + n;
  const auto* it = std::upper_bound(t, end, c, [](char32_t v, const tables::CodeRange& r) { return v < r.first; });
  if (it == t) return false;
  --it;
  return c >= it->first && c <= it->last;
}

bool is_cased(char32_t c) { return in_ranges(tables::kCased, tables::kCased_size, c); }

// Case mapping looks up every code point in a table: charged per code point on top of decoding
// (measured: about ten times the cost of copying a byte).
constexpr uint64_t kCaseMapCost = 8;

void append_mapped(std::string& out, const tables::CaseEntry* t, size_t n, char32_t c) {
  if (const char* m = case_lookup(t, n, c)) out += m;
  else append_utf8(out, c);
}

// Lowercase of u[i] with CPython's final-sigma rule (case-ignorable characters are not skipped:
// a documented approximation).
void append_lower_at(std::string& out, const std::u32string& u, size_t i) {
  if (u[i] == 0x03A3) {
    const bool before = i > 0 && is_cased(u[i - 1]);
    const bool after = i + 1 < u.size() && is_cased(u[i + 1]);
    if (before && !after) { append_utf8(out, 0x03C2); return; }
  }
  append_mapped(out, tables::kLower, tables::kLower_size, u[i]);
}

}  // namespace

std::string py_lower(std::string_view s) {
  const std::u32string u = utf8_decode(s);
  charge_work(sat_mul_add(u.size(), kCaseMapCost));
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) append_lower_at(out, u, i);
  return out;
}

std::string py_upper(std::string_view s) {
  std::string out;
  charge_work(sat_mul_add(s.size(), kCaseMapCost));
  for (char32_t c : utf8_decode(s)) append_mapped(out, tables::kUpper, tables::kUpper_size, c);
  return out;
}

std::string py_capitalize(std::string_view s) {
  const std::u32string u = utf8_decode(s);
  charge_work(sat_mul_add(u.size(), kCaseMapCost));
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) append_mapped(out, tables::kTitle, tables::kTitle_size, u[i]);
    else append_lower_at(out, u, i);
  }
  return out;
}

std::string py_title(std::string_view s) {
  const std::u32string u = utf8_decode(s);
  charge_work(sat_mul_add(u.size(), kCaseMapCost));
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < u.size(); ++i) {
    if (prev_cased) append_lower_at(out, u, i);
    else append_mapped(out, tables::kTitle, tables::kTitle_size, u[i]);
    prev_cased = is_cased(u[i]);
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // Jinja: re.split(r"([-\s({\[<]+)") then item[0].upper() + item[1:].lower() per piece.
  const std::u32string u = utf8_decode(s);
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::string out;
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    const bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    const std::u32string piece = u.substr(i, j - i);
    out += py_upper(utf8_encode(piece.substr(0, 1)));
    out += py_lower(utf8_encode(piece.substr(1)));
    i = j;
  }
  return out;
}

// ---- repr / float / json ----

std::string py_repr_str(std::string_view s) {
  const std::u32string u = utf8_decode(s);
  const bool has_single = u.find(U'\'') != std::u32string::npos;
  const bool has_double = u.find(U'"') != std::u32string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  char buf[16];
  for (char32_t c : u) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else if (in_ranges(tables::kNonPrintable, tables::kNonPrintable_size, c)) {
      if (c <= 0xFF) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      else if (c <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(q);
  return out;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then laid out the way CPython's
  // float_repr does: positional when -4 <= exponent < 16, else d.ddde+XX.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') { sign = "-"; sci.erase(0, 1); }
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out;
  if (exp >= -5 && exp < 16) {
    const int decpt = exp + 1;  // digits before the decimal point
    if (decpt <= 0) {
      out = "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= static_cast<int>(digits.size())) {
      out = digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    // CPython switches to exponent form when the decimal exponent is < -4.
    if (exp < -4) {
      out.clear();
    }
  }
  if (out.empty()) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return sign + out;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  char buf[16];
  auto esc = [&](char32_t c) {
    std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
    out += buf;
  };
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      esc(c);
    } else if (ensure_ascii && c > 0x7E) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        esc(0xD800 | (v >> 10));
        esc(0xDC00 | (v & 0x3FF));
      } else {
        esc(c);
      }
    } else {
      append_utf8(out, c);
    }
  }
  out += "\"";
  return out;
}

}  // namespace lfm::jinja
