// GBNF for JSON numbers within bounds (JSON Schema minimum / maximum / exclusive*), written as
// digit-range alternatives so the grammar derives exactly the numbers in range.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lfm::grammar {

// Decimal digits of an unbounded integer or fraction: a model cannot write more (no JSON number
// it would sensibly produce has more, and an endless digit run is a way to never stop).
constexpr int kMaxIntegerDigits = 16;
constexpr int kMaxFractionDigits = 16;

// Integers lo <= n <= hi (either side open when absent), in JSON form: no leading zeros, no "-0".
// Unbounded sides stop at kMaxIntegerDigits digits (or the bound's own length, when longer).
// Returns a GBNF expression; "" when the range is empty.
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

// JSON numbers x (integer part, optional fraction, no exponent) with lo <= x (lo < x when
// lo_exclusive) and x <= hi (x < hi), bounds being integers. "" when the range is empty.
std::string decimal_range_gbnf(std::optional<int64_t> lo, bool lo_exclusive, std::optional<int64_t> hi,
                               bool hi_exclusive);

}  // namespace lfm::grammar
