#include "grammar/number_ranges.h"

#include <algorithm>
#include <vector>

namespace lfm::grammar {

namespace {

std::string join_alts(const std::vector<std::string>& alts) {
  if (alts.empty()) return "";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return std::string("[") + lo + "-" + hi + "]";
}

std::string any_digits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

std::string cat_expr(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

// Digit strings of x's length between x and y (inclusive, equal lengths), lexicographically =
// numerically. The first digit splits the range into: x's first digit with the rest >= x's rest,
// the digits strictly between with anything after, y's first digit with the rest <= y's rest.
std::string same_length(const std::string& x, const std::string& y) {
  if (x.empty()) return "";
  const size_t n = x.size() - 1;
  if (x[0] == y[0]) return cat_expr(std::string("\"") + x[0] + "\"", same_length(x.substr(1), y.substr(1)));
  const bool x_rest_zero = x.find_first_not_of('0', 1) == std::string::npos;
  const bool y_rest_nine = y.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> alts;
  if (!x_rest_zero)
    alts.push_back(cat_expr(std::string("\"") + x[0] + "\"", same_length(x.substr(1), std::string(n, '9'))));
  const char lo = x_rest_zero ? x[0] : static_cast<char>(x[0] + 1);
  const char hi = y_rest_nine ? y[0] : static_cast<char>(y[0] - 1);
  if (lo <= hi) alts.push_back(cat_expr(digit_class(lo, hi), any_digits(n)));
  if (!y_rest_nine)
    alts.push_back(cat_expr(std::string("\"") + y[0] + "\"", same_length(std::string(n, '0'), y.substr(1))));
  return join_alts(alts);
}

// Non-negative integers a <= n <= b (b absent: unbounded).
std::string non_negative(uint64_t a, std::optional<uint64_t> b) {
  if (b && *b < a) return "";
  const std::string as = std::to_string(a);
  const size_t da = as.size();
  const size_t db = b ? std::to_string(*b).size() : std::max<size_t>(da, kMaxIntegerDigits);
  std::vector<std::string> alts;
  // Numbers of a's length, then the lengths strictly between (any digits), then b's length.
  const std::string first_hi = (b && db == da) ? std::to_string(*b) : std::string(da, '9');
  alts.push_back(same_length(as, first_hi));
  if (db > da + 1) {
    // d digits for da < d < db (or <= db when unbounded): [1-9] then d-1 digits.
    const size_t min_rest = da, max_rest = b ? db - 2 : db - 1;
    if (min_rest <= max_rest)
      alts.push_back("[1-9] [0-9]{" + std::to_string(min_rest) + "," + std::to_string(max_rest) + "}");
  }
  if (b && db > da) alts.push_back(same_length("1" + std::string(db - 1, '0'), std::to_string(*b)));
  else if (!b && db > da && db == da + 1) alts.push_back("[1-9] " + any_digits(da));
  return join_alts(alts);
}

}  // namespace

std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return "";
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {
    // -n for n in [max(1, -hi), -lo].
    const uint64_t nlo = (hi && *hi < 0) ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
    std::optional<uint64_t> nhi;
    if (lo) nhi = static_cast<uint64_t>(-(*lo + 1)) + 1;
    const std::string n = non_negative(nlo, nhi);
    if (!n.empty()) alts.push_back("\"-\" " + n);
  }
  if (!hi || *hi >= 0) {
    std::optional<uint64_t> phi;
    if (hi) phi = static_cast<uint64_t>(*hi);
    const std::string p = non_negative(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0, phi);
    if (!p.empty()) alts.push_back(p);
  }
  return join_alts(alts);
}

namespace {

const std::string kFrac = "(\".\" [0-9]{1," + std::to_string(kMaxFractionDigits) + "})?";
const std::string kNonZeroFrac = "\".\" [0-9]{0," + std::to_string(kMaxFractionDigits - 1) + "} [1-9]";
const std::string kZeroFrac = "(\".\" \"0\"{1," + std::to_string(kMaxFractionDigits) + "})?";

// y >= l (y > l when lex) and y <= h (y < h when hex), l >= 0, written as integer part and
// fraction: the integer part l, the parts strictly between (any fraction), the part h.
std::string non_negative_decimal(uint64_t l, bool lex, std::optional<uint64_t> h, bool hex) {
  std::vector<std::string> alts;
  if (h && *h < l) return "";
  if (h && *h == l) {
    if (!lex && !hex) alts.push_back(cat_expr(non_negative(l, l), kZeroFrac));
    return join_alts(alts);
  }
  alts.push_back(cat_expr(non_negative(l, l), lex ? kNonZeroFrac : kFrac));
  if (!h || *h >= l + 2) {
    std::optional<uint64_t> mid_hi;
    if (h) mid_hi = *h - 1;
    alts.push_back(cat_expr(non_negative(l + 1, mid_hi), kFrac));
  }
  if (h && !hex) alts.push_back(cat_expr(non_negative(*h, *h), kZeroFrac));
  return join_alts(alts);
}

}  // namespace

std::string decimal_range_gbnf(std::optional<int64_t> lo, bool lo_exclusive, std::optional<int64_t> hi,
                               bool hi_exclusive) {
  if (lo && hi && (*lo > *hi || (*lo == *hi && (lo_exclusive || hi_exclusive)))) return "";
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {
    // x < 0 written as "-" y with y = -x > 0: y above max(0, -hi), below -lo.
    const bool hi_negative = hi && *hi < 0;
    const uint64_t ylo = hi_negative ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 0;
    const bool ylo_ex = hi_negative ? hi_exclusive : true;
    std::optional<uint64_t> yhi;
    if (lo) yhi = static_cast<uint64_t>(-(*lo + 1)) + 1;
    const std::string n = non_negative_decimal(ylo, ylo_ex, yhi, lo_exclusive);
    if (!n.empty()) alts.push_back("\"-\" " + n);
  }
  if (!hi || *hi >= 0) {
    const uint64_t l = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    const bool lex = lo && *lo >= 0 && lo_exclusive;
    std::optional<uint64_t> h;
    if (hi) h = static_cast<uint64_t>(*hi);
    const std::string p = non_negative_decimal(l, lex, h, hi_exclusive);
    if (!p.empty()) alts.push_back(p);
  }
  return join_alts(alts);
}

}  // namespace lfm::grammar
