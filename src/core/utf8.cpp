#include "core/utf8.h"

namespace lfm {
namespace {

// Scans one sequence at s[i]. Returns the number of bytes it spans and sets `complete`:
// complete = true  → a well-formed sequence of that length;
// complete = false → an ill-formed (or truncated) prefix of that length (≥ 1), which a lossy
//                    decoder replaces by one U+FFFD. `truncated` tells whether it stopped only
//                    because the input ended.
size_t scan_sequence(std::string_view s, size_t i, bool& complete, bool& truncated) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  complete = false;
  truncated = false;
  if (b0 < 0x80) {
    complete = true;
    return 1;
  }
  size_t need;                         // continuation bytes required
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the FIRST continuation byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;  // excludes UTF-16 surrogates
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 1;  // stray continuation byte or a byte that never starts a sequence
  }
  size_t len = 1;
  for (size_t k = 0; k < need; ++k, ++len) {
    if (i + len >= s.size()) {
      truncated = true;
      return len;
    }
    const auto b = static_cast<unsigned char>(s[i + len]);
    const unsigned char l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
    if (b < l || b > h) return len;
  }
  complete = true;
  return len;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool complete, truncated;
    const size_t n = scan_sequence(s, i, complete, truncated);
    if (!complete) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    bool complete, truncated;
    const size_t n = scan_sequence(bytes, i, complete, truncated);
    if (complete) {
      out.append(bytes.data() + i, n);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    i += n;
  }
  return out;
}

size_t incomplete_utf8_tail(std::string_view s) {
  // A sequence is at most 4 bytes, so only a lead byte among the last 3 can be pending.
  const size_t first = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = s.size(); i-- > first;) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) return 0;
    if (b >= 0xC0) {
      bool complete, truncated;
      const size_t n = scan_sequence(s, i, complete, truncated);
      return (!complete && truncated && i + n == s.size()) ? s.size() - i : 0;
    }
  }
  return 0;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const int len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace lfm
